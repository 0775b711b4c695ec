// Helpers shared by the libFuzzer harnesses (tests/fuzz/*_fuzz.cpp): a fuzzer's bytes split into
// a flags byte and the text, and the text fed in pieces the way a stream delivers it.
// Single-threaded: libFuzzer calls each harness on one thread.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

namespace qs::fuzz {

struct FuzzInput {
    uint8_t flags = 0;      // bit i: option i of the harness; bits 3..7: chunk size - 1
    std::string_view text;  // the rest of the input
    size_t chunk_bytes() const { return 1 + (flags >> 3); }
};

inline FuzzInput split_input(const uint8_t* data, size_t size) {
    FuzzInput in;
    if (size == 0) return in;
    in.flags = data[0];
    in.text = std::string_view(reinterpret_cast<const char*>(data) + 1, size - 1);
    return in;
}

// Calls feed(piece) for consecutive pieces of `text`, each chunk_bytes long (the last shorter).
template <typename Feed>
void feed_in_chunks(std::string_view text, size_t chunk_bytes, Feed&& feed) {
    for (size_t pos = 0; pos < text.size(); pos += chunk_bytes)
        feed(text.substr(pos, std::min(chunk_bytes, text.size() - pos)));
}

// A harness-detected bug (an invariant a parser broke): abort so libFuzzer records the input.
#define QS_FUZZ_ASSERT(cond)                                                            \
    do {                                                                                \
        if (!(cond)) {                                                                  \
            __builtin_printf("fuzz invariant failed: %s (%s:%d)\n", #cond, __FILE__, __LINE__); \
            std::abort();                                                               \
        }                                                                               \
    } while (0)

}  // namespace qs::fuzz

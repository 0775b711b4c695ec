// PageHash (see page_hash.h).
#include "engine/page_hash.h"

#define XXH_INLINE_ALL
#include <xxhash.h>

#include <cstring>
#include <random>
#include <vector>

#include "core/check.h"

namespace qs {

PageHash xxh3_page_hash(uint64_t seed, const PageHash& prev, const int32_t* tokens, int64_t n) {
    static_assert(sizeof(int32_t) == 4 && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
                  "the key's byte layout assumes little-endian int32 tokens");
    QS_CHECK(n >= 0);
    // One contiguous input (prev, tokens): a page is at most 1024 tokens (kv_block_size's range).
    constexpr int64_t kStackTokens = 1024;
    uint8_t stack[16 + 4 * kStackTokens];
    std::vector<uint8_t> heap;
    uint8_t* buf = stack;
    if (n > kStackTokens) {
        heap.resize(size_t(16 + 4 * n));
        buf = heap.data();
    }
    std::memcpy(buf, &prev.lo, 8);
    std::memcpy(buf + 8, &prev.hi, 8);
    std::memcpy(buf + 16, tokens, size_t(n) * 4);
    const XXH128_hash_t h = XXH3_128bits_withSeed(buf, size_t(16 + 4 * n), seed);
    return PageHash{h.low64, h.high64};
}

uint64_t random_page_hash_seed() {
    std::random_device rd;
    return (uint64_t(rd()) << 32) ^ uint64_t(rd());
}

}  // namespace qs

// The random values of dummy weights (`--load-format dummy`): counter-based streams keyed by
// (seed, tensor name, chunk index), so any element can be made on its own and values do not
// depend on thread count or load order. Used by model/dummy_weights (the text model) and
// model/dummy_vision_tower.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>

namespace qs::dummy {

inline uint64_t splitmix64(uint64_t x) {
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

inline uint64_t name_hash(const std::string& s) {
    uint64_t h = 1469598103934665603ull;  // FNV-1a
    for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
    return h;
}

// Values come in chunks of kChunk elements; element i of chunk c of a tensor keyed by `key` is
// mix(splitmix64(key ^ c) + (i + 1)·γ) (the splitmix64 sequence started at splitmix64(key ^ c)),
// so any element can be made on its own: any thread can fill any range.
constexpr int64_t kChunk = 4096;
constexpr uint64_t kGamma = 0x9e3779b97f4a7c15ull;

// The top 24 bits as a float in [0, 1) (through int32, which vectorises; exact either way).
inline float to_unit(uint64_t r) { return float(int32_t(r >> 40)) * (1.0f / 16777216.0f); }

inline uint64_t mix(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

// out[0, n) = elements [first, first + n) of stream `key`, uniform in [lo, hi).
inline void fill_stream(uint64_t key, int64_t first, int64_t n, float lo, float hi, float* out) {
    const float span = hi - lo;
    for (int64_t k = first; k < first + n;) {
        const int64_t c = k / kChunk, i0 = k % kChunk;
        const int64_t m = std::min(kChunk - i0, first + n - k);
        const uint64_t state = splitmix64(key ^ uint64_t(c)) + uint64_t(i0) * kGamma;
        float* dst = out + (k - first);
#pragma omp simd
        for (int64_t i = 0; i < m; ++i) dst[i] = lo + span * to_unit(mix(state + uint64_t(i + 1) * kGamma));
        k += m;
    }
}

}  // namespace qs::dummy

// Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC'11): a
// counter-based generator, so the noise of draw `d` of completion `key` at vocabulary index `i`
// is a pure function of (key, d, i). The sampler's draws therefore depend neither on the batch a
// row is in nor on the thread that computes them, and host and device get the same bits.
// Compiles as host code and as CUDA device code.
#pragma once

#include <cmath>
#include <cstdint>

#include "core/host_device.h"

namespace qs {

struct Philox4 {
    uint32_t v[4];
};

// One Philox4x32 block: counter (c0..c3) under key (k0, k1), 10 rounds.
QS_HD Philox4 philox4x32(uint32_t c0, uint32_t c1, uint32_t c2, uint32_t c3, uint32_t k0, uint32_t k1) {
    constexpr uint32_t kMul0 = 0xD2511F53u, kMul1 = 0xCD9E8D57u;
    constexpr uint32_t kWeyl0 = 0x9E3779B9u, kWeyl1 = 0xBB67AE85u;
    for (int round = 0; round < 10; ++round) {
        const uint64_t p0 = uint64_t(kMul0) * c0, p1 = uint64_t(kMul1) * c2;
        const uint32_t hi0 = uint32_t(p0 >> 32), lo0 = uint32_t(p0);
        const uint32_t hi1 = uint32_t(p1 >> 32), lo1 = uint32_t(p1);
        const uint32_t n0 = hi1 ^ c1 ^ k0, n2 = hi0 ^ c3 ^ k1;
        c0 = n0, c1 = lo1, c2 = n2, c3 = lo0;
        k0 += kWeyl0, k1 += kWeyl1;
    }
    return {{c0, c1, c2, c3}};
}

// The uniform in (0, 1) for vocabulary index `i` of draw `draw` of the stream `key`: 53 bits
// from two of the block's words (0 and 1 are excluded, so the Gumbel below is finite).
QS_HD double sampling_uniform(uint64_t key, uint64_t draw, uint32_t i) {
    const Philox4 r = philox4x32(i, uint32_t(draw), uint32_t(draw >> 32), 0x51ED2701u, uint32_t(key), uint32_t(key >> 32));
    const uint64_t bits = (uint64_t(r.v[0]) << 21) ^ uint64_t(r.v[1]);  // 53 bits
    return (double(bits & ((uint64_t(1) << 53) - 1)) + 0.5) * (1.0 / 9007199254740992.0);
}

// Standard Gumbel noise for (key, draw, i): argmax_i(logit_i / T + g_i) is a draw from
// softmax(logit / T) (the Gumbel-max trick). Double precision so host and device agree except
// in the last bit of a double, far below any gap between two candidates' scores.
QS_HD double sampling_gumbel_of(double u) { return -::log(-::log(u)); }
QS_HD double sampling_gumbel(uint64_t key, uint64_t draw, uint32_t i) {
    return sampling_gumbel_of(sampling_uniform(key, draw, i));
}

}  // namespace qs

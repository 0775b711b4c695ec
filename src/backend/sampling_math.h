// The scalar pieces of the sampling contract (backend/sampling.h) that the CPU specification and
// the CUDA kernels must compute identically: the fixed-point weight that top-p sums and the
// min-p test. Host and device code.
#pragma once

#include <math.h>

#include <cstdint>
#include <cstring>

#include "core/philox.h"

namespace qs {

// round(exp(s - m) · 2^32): integer weights make top-p's sums independent of summation order.
QS_HD uint64_t sampling_weight_fixed(float s, float m) {
    return uint64_t(double(expf(s - m)) * 4294967296.0 + 0.5);
}

// min-p keeps a token whose probability is at least min_p times the largest one.
QS_HD bool sampling_min_p_keeps(float s, float m, float min_p) { return min_p <= 0.0f || expf(s - m) >= min_p; }

// An order-preserving unsigned key of a float (larger float, larger key; -0 < +0), for radix
// selection. NaN is not expected.
QS_HD uint32_t float_order_key(float x) {
#if defined(__CUDA_ARCH__)
    const uint32_t u = __float_as_uint(x);
#else
    uint32_t u;
    std::memcpy(&u, &x, sizeof(u));
#endif
    return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

QS_HD float float_from_order_key(uint32_t k) {
    const uint32_t u = (k & 0x80000000u) ? (k & 0x7fffffffu) : ~k;
#if defined(__CUDA_ARCH__)
    return __uint_as_float(u);
#else
    float x;
    std::memcpy(&x, &u, sizeof(x));
    return x;
#endif
}

}  // namespace qs

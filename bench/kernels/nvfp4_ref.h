// NVFP4 test data and CPU reference for the 4-bit kernels on NVFP4 weights (int4_gemv_lab.cu
// --nvfp4 on the GPU, emu/int4_emu.cpp in the host SIMT emulation). Written from the format's
// definition (backend/nvfp4_layout.h, linear_weight.h), not from the kernels: E2M1 code of input i
// = nibble 4·(i%8) of word codes[o][i/8], its value from the E2M1 table; the block scale the E4M3
// byte of (o, i/16) decoded here from its bits (the device layout holds the bytes themselves);
// W[o][i] = e2m1 · e4m3 · global and y[t][o] = Σ_i W[o][i] · bf16(x[t][i]) in double. Scale bytes
// span E4M3 exponents 2^[-6, 3] (subnormal bytes too) so a scale-index mistake cannot hide; the
// global is not a power of two (its rounding is the kernel's only one besides the fp32 sums).
#pragma once

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "int4_ref.h"

namespace nvfp4_lab {

using int4_lab::bf16_bits;
using int4_lab::bf16_value;

inline float e2m1_value(uint32_t c) {
    static const float mag[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
    return (c & 8u) ? -mag[c & 7u] : mag[c & 7u];
}

inline float e4m3_value(uint8_t b) {  // finite bytes (not 0x7F / 0xFF)
    const int e = (b >> 3) & 15, m = b & 7;
    const float mag = e == 0 ? std::ldexp(float(m), -9) : std::ldexp(1.0f + float(m) / 8.0f, e - 7);
    return (b & 0x80u) ? -mag : mag;
}

struct Case {
    int64_t out, in, T;
    std::vector<uint32_t> codes;      // [out, in/8]
    std::vector<uint8_t> scale_bytes; // E4M3 [out, in/16], the device layout's scales
    float global = 1.0f;
    std::vector<float> x;             // [T, in]
};

inline Case make_case(int64_t out, int64_t in, int64_t T, uint32_t seed) {
    Case c{out, in, T, {}, {}, 1.0f, {}};
    std::mt19937 rng(seed);
    c.codes.resize(size_t(out * in / 8));
    for (uint32_t& w : c.codes) w = uint32_t(rng());
    c.scale_bytes.resize(size_t(out * (in / 16)));
    for (uint8_t& b : c.scale_bytes)  // exponent field 0 (subnormal) .. 10, any mantissa; positive as the quantisers write them
        b = uint8_t(((rng() % 11) << 3) | (rng() % 8));
    c.global = 0.0123f + 0.001f * float(seed % 7);
    std::normal_distribution<float> n(0.0f, 1.0f);
    c.x.resize(size_t(T * in));
    for (int64_t t = 0; t < T; ++t)
        for (int64_t k0 = 0; k0 < in; k0 += 32) {
            const float f = std::ldexp(1.0f, -3 + int(rng() % 7));
            for (int64_t k = k0; k < k0 + 32; ++k) c.x[size_t(t * in + k)] = f * n(rng);
        }
    return c;
}

inline double weight(const Case& c, int64_t o, int64_t i) {
    const uint32_t code = (c.codes[size_t(o * (c.in / 8) + i / 8)] >> (4 * (i % 8))) & 15u;
    return double(e2m1_value(code)) * double(e4m3_value(c.scale_bytes[size_t(o * (c.in / 16) + i / 16)])) *
           double(c.global);
}

// y [T, out] in double.
inline std::vector<double> reference(const Case& c) {
    std::vector<double> y(size_t(c.T * c.out));
    std::vector<double> row(size_t(c.in));
    for (int64_t o = 0; o < c.out; ++o) {
        for (int64_t i = 0; i < c.in; ++i) row[size_t(i)] = weight(c, o, i);
        for (int64_t t = 0; t < c.T; ++t) {
            double s = 0;
            for (int64_t i = 0; i < c.in; ++i)
                s += row[size_t(i)] * double(bf16_value(bf16_bits(c.x[size_t(t * c.in + i)])));
            y[size_t(t * c.out + o)] = s;
        }
    }
    return y;
}

}  // namespace nvfp4_lab

// INT4 W4A16 test data and CPU reference for the INT4 kernels (int4_gemv_lab.cu on the GPU,
// emu/int4_emu.cpp in the host SIMT emulation). Written from the format's definition
// (backend/int4_layout.h), not from the kernels: W[o][i] = q·scale[o][i/group] with q the two's
// complement value of nibble 4·(i%8) of word codes[o][i/8]; y[t][o] = Σ_i W[o][i] · bf16(x[t][i]) in double.
// Scales vary per (row, group) over 2^[-10, -4] so a scale-index mistake cannot hide; x varies
// per (row, 32-column chunk) by 2^[-3, 3].
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

namespace int4_lab {

struct Case {
    int64_t out, in, group, T;
    std::vector<uint32_t> codes;   // [out, in/8]
    std::vector<uint16_t> scales;  // bf16 bits [out, in/group]
    std::vector<float> x;          // [T, in]
};

inline uint16_t bf16_bits(float f) {  // round to nearest even (finite inputs)
    uint32_t u;
    std::memcpy(&u, &f, 4);
    return uint16_t((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}
inline float bf16_value(uint16_t b) {
    const uint32_t u = uint32_t(b) << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
}

inline Case make_case(int64_t out, int64_t in, int64_t group, int64_t T, uint32_t seed) {
    Case c{out, in, group, T, {}, {}, {}};
    std::mt19937 rng(seed);
    c.codes.resize(size_t(out * in / 8));
    for (uint32_t& w : c.codes) w = uint32_t(rng());
    std::uniform_real_distribution<float> u(0.0f, 1.0f);
    c.scales.resize(size_t(out * (in / group)));
    for (uint16_t& s : c.scales) s = bf16_bits(std::ldexp(1.0f + u(rng), -10 + int(rng() % 7)));
    std::normal_distribution<float> n(0.0f, 1.0f);
    c.x.resize(size_t(T * in));
    for (int64_t t = 0; t < T; ++t)
        for (int64_t k0 = 0; k0 < in; k0 += 32) {
            const float f = std::ldexp(1.0f, -3 + int(rng() % 7));
            for (int64_t k = k0; k < k0 + 32; ++k) c.x[size_t(t * in + k)] = f * n(rng);
        }
    return c;
}

inline float weight(const Case& c, int64_t o, int64_t i) {
    const uint32_t n = (c.codes[size_t(o * (c.in / 8) + i / 8)] >> (4 * (i % 8))) & 15u;
    const int q = n < 8 ? int(n) : int(n) - 16;  // two's complement (backend/int4_layout.h)
    return float(q) * bf16_value(c.scales[size_t(o * (c.in / c.group) + i / c.group)]);
}

// y [T, out] in double.
inline std::vector<double> reference(const Case& c) {
    std::vector<double> y(size_t(c.T * c.out));
    std::vector<float> row(size_t(c.in));
    for (int64_t o = 0; o < c.out; ++o) {
        for (int64_t i = 0; i < c.in; ++i) row[size_t(i)] = weight(c, o, i);
        for (int64_t t = 0; t < c.T; ++t) {
            double s = 0;
            for (int64_t i = 0; i < c.in; ++i)
                s += double(row[size_t(i)]) * double(bf16_value(bf16_bits(c.x[size_t(t * c.in + i)])));
            y[size_t(t * c.out + o)] = s;
        }
    }
    return y;
}

// ‖got − ref‖ / ‖ref‖.
inline double rel_error(const std::vector<float>& got, const std::vector<double>& ref) {
    double d = 0, r = 0;
    for (size_t i = 0; i < ref.size(); ++i) {
        const double e = double(got[i]) - ref[i];
        d += e * e;
        r += ref[i] * ref[i];
    }
    return std::sqrt(d / (r > 0 ? r : 1));
}

}  // namespace int4_lab

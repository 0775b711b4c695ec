// Number-format conversions against independent definitions (IEEE / OCP FP8 tables).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>

#include "core/dtype.h"

using namespace qs;

TEST(DType, Bf16RoundsToNearestEven) {
    // 1 + 2^-8 is exactly halfway between bf16 1.0 and 1 + 2^-7: ties go to even (1.0).
    EXPECT_EQ(round_to_bf16(1.0f + std::ldexp(1.0f, -8)), 1.0f);
    // 1 + 3*2^-8 is halfway between 1+2^-7 and 1+2^-6: ties go to even (1+2^-6).
    EXPECT_EQ(round_to_bf16(1.0f + 3 * std::ldexp(1.0f, -8)), 1.0f + std::ldexp(1.0f, -6));
    EXPECT_TRUE(std::isnan(round_to_bf16(std::nanf(""))));
    EXPECT_EQ(round_to_bf16(-2.5f), -2.5f);
}

TEST(DType, F16RoundTripsEveryCode) {
    for (uint32_t code = 0; code < 65536; ++code) {
        f16 h{uint16_t(code)};
        float f = f16_to_f32(h);
        if (std::isnan(f)) continue;
        EXPECT_EQ(f32_to_f16(f).bits, h.bits) << code;
    }
    EXPECT_EQ(f16_to_f32(f16{0x3c00}), 1.0f);
    EXPECT_EQ(f16_to_f32(f16{0x0001}), std::ldexp(1.0f, -24));
    EXPECT_EQ(f16_to_f32(f16{0x7bff}), 65504.0f);
}

TEST(DType, Fp8E4M3MatchesTheFormatDefinition) {
    // Independent decode: sign * 2^(e-7) * (1 + m/8), subnormal 2^-6 * m/8.
    for (int code = 0; code < 256; ++code) {
        int s = code >> 7, e = (code >> 3) & 15, m = code & 7;
        float v = fp8e4m3_to_f32(fp8e4m3{uint8_t(code)});
        if (e == 15 && m == 7) {
            EXPECT_TRUE(std::isnan(v));
            continue;
        }
        double ref = e == 0 ? std::ldexp(m / 8.0, -6) : std::ldexp(1.0 + m / 8.0, e - 7);
        if (s) ref = -ref;
        EXPECT_EQ(double(v), ref) << code;
        EXPECT_EQ(fp8e4m3_to_f32(f32_to_fp8e4m3(v)), v) << code;  // round trip
    }
    EXPECT_EQ(fp8e4m3_to_f32(f32_to_fp8e4m3(1000.0f)), 448.0f);  // satfinite
    EXPECT_EQ(fp8e4m3_to_f32(f32_to_fp8e4m3(-1000.0f)), -448.0f);
}

TEST(DType, Fp8E4M3RoundsToNearest) {
    // Brute force: the encoded value must be a nearest representable value.
    std::vector<float> all;
    for (int code = 0; code < 127; ++code) all.push_back(fp8e4m3_to_f32(fp8e4m3{uint8_t(code)}));
    std::mt19937 rng(7);
    std::uniform_real_distribution<float> dist(0.0f, 448.0f);
    for (int i = 0; i < 20000; ++i) {
        float x = dist(rng) * (i % 2 ? 1.0f : 1e-3f);
        float got = fp8e4m3_to_f32(f32_to_fp8e4m3(x));
        float best = 1e30f;
        for (float v : all) best = std::min(best, std::fabs(v - x));
        EXPECT_EQ(std::fabs(got - x), best) << x;
    }
}

// The bit-arithmetic encoder against the frexp/nearbyint definition on a sweep of f32 bit
// patterns (every value class: zeros, subnormals, both rounding directions, ties, saturation, inf,
// NaN). The whole 2^32 range was compared once when the encoder was written.
TEST(DType, Fp8E4M3EncoderMatchesReferenceOnBitPatternSweep) {
    auto reference = [](float f) -> uint8_t {
        if (std::isnan(f)) return 0x7f;
        const uint8_t sign = std::signbit(f) ? 0x80 : 0;
        const float a = std::fabs(f);
        if (a >= 448.0f) return uint8_t(sign | 0x7e);
        if (a < std::ldexp(1.0f, -6)) return uint8_t(sign | uint8_t(std::nearbyint(a * 512.0f)));
        int e;
        std::frexp(a, &e);
        int exp = e - 1;
        float r = std::nearbyint(std::ldexp(a, 3 - exp));
        if (r >= 16.0f) {
            r = 8.0f;
            exp += 1;
        }
        return uint8_t(sign | std::min(0x7e, ((exp + 7) << 3) | (int(r) - 8)));
    };
    for (uint64_t u = 0; u < (1ull << 32); u += 65521) {
        const float f = bits_to_f32(uint32_t(u));
        ASSERT_EQ(f32_to_fp8e4m3(f).bits, reference(f)) << std::hex << u;
    }
    // Every code's value, the midpoints between neighbours and one ulp either side of them.
    for (int code = 0; code < 0x7e; ++code) {
        const float lo = fp8e4m3_to_f32(fp8e4m3{uint8_t(code)}), hi = fp8e4m3_to_f32(fp8e4m3{uint8_t(code + 1)});
        const float mid = lo + (hi - lo) / 2;
        for (float x : {lo, mid, std::nextafter(mid, 0.0f), std::nextafter(mid, 1e9f), hi})
            for (float s : {1.0f, -1.0f}) ASSERT_EQ(f32_to_fp8e4m3(s * x).bits, reference(s * x)) << x;
    }
    EXPECT_EQ(f32_to_fp8e4m3(INFINITY).bits, 0x7e);
    EXPECT_EQ(f32_to_fp8e4m3(-INFINITY).bits, 0xfe);
    EXPECT_EQ(f32_to_fp8e4m3(464.0f).bits, 0x7e);
    for (int c = 0; c < 256; ++c) {
        const float a = fp8e4m3_table()[c], b = fp8e4m3_to_f32(fp8e4m3{uint8_t(c)});
        EXPECT_TRUE(a == b || (std::isnan(a) && std::isnan(b))) << c;
    }
}

TEST(DType, Fp4E2M1Table) {
    const float expect[16] = {0, .5f, 1, 1.5f, 2, 3, 4, 6, -0.0f, -.5f, -1, -1.5f, -2, -3, -4, -6};
    for (int c = 0; c < 16; ++c) EXPECT_EQ(fp4e2m1_to_f32(uint8_t(c)), expect[c]);
}

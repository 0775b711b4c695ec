// Number-format conversions against independent definitions (IEEE / OCP FP8 tables).
#include <gtest/gtest.h>

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

TEST(DType, Fp4E2M1Table) {
    const float expect[16] = {0, .5f, 1, 1.5f, 2, 3, 4, 6, -0.0f, -.5f, -1, -1.5f, -2, -3, -4, -6};
    for (int c = 0; c < 16; ++c) EXPECT_EQ(fp4e2m1_to_f32(uint8_t(c)), expect[c]);
}

// Element types of checkpoints and buffers, and exact scalar conversions between them.
// bf16/f16/fp8-e4m3/fp4-e2m1 are stored as raw bits; conversions round to nearest even,
// which is what the GPU's conversion instructions do, so CPU emulation matches the GPU bit for bit.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string_view>

namespace qs {

enum class DType : uint8_t { kF32, kF16, kBF16, kF8E4M3, kU8, kI8, kI32, kI64, kBool };

// Bytes per element.
size_t dtype_size(DType t);
// The safetensors name ("F32", "BF16", "F8_E4M3", ...).
std::string_view dtype_name(DType t);
std::optional<DType> dtype_from_safetensors_name(std::string_view name);

struct bf16 { uint16_t bits; };
struct f16 { uint16_t bits; };
struct fp8e4m3 { uint8_t bits; };

inline float bits_to_f32(uint32_t u) { float f; std::memcpy(&f, &u, 4); return f; }
inline uint32_t f32_to_bits(float f) { uint32_t u; std::memcpy(&u, &f, 4); return u; }

inline float bf16_to_f32(bf16 x) { return bits_to_f32(uint32_t(x.bits) << 16); }
inline bf16 f32_to_bf16(float f) {
    uint32_t u = f32_to_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return bf16{uint16_t((u >> 16) | 0x40)};  // quiet NaN
    u += 0x7fffu + ((u >> 16) & 1u);  // round to nearest even
    return bf16{uint16_t(u >> 16)};
}
// Rounds a float to the nearest bf16 value and returns it as float.
inline float round_to_bf16(float f) { return bf16_to_f32(f32_to_bf16(f)); }

float f16_to_f32(f16 x);
f16 f32_to_f16(float f);

// FP8 E4M3 ("e4m3fn"): bias 7, no infinities, 0x7F/0xFF are NaN, max finite 448.
float fp8e4m3_to_f32(fp8e4m3 x);
// The 256 decoded values, indexed by code (for loops that decode many: one load per element).
const float* fp8e4m3_table();
// Round to nearest even; values beyond ±448 (and ±inf) saturate to ±448 (the GPU's satfinite
// mode); NaN → 0x7F. Branch-free bit arithmetic on the f32 encoding, inline, so that quantisation
// loops vectorise.
inline fp8e4m3 f32_to_fp8e4m3(float f) {
    const uint32_t u = f32_to_bits(f);
    const uint32_t sign = (u >> 24) & 0x80u;
    const uint32_t a = u & 0x7fffffffu;
    // Normal range [2^-6, 448): keep 3 of 23 mantissa bits with round-to-nearest-even (a carry
    // moves into the exponent) and rebias the exponent from 127 to 7.
    const uint32_t normal = ((a + 0x7ffffu + ((a >> 20) & 1u)) >> 20) - (120u << 3);
    // Below 2^-6: value = m · 2^-9, m in 0..8 (8 is the smallest normal, code 0x08). Adding 2^23
    // rounds |f| · 512 to an integer with the FPU's round-to-nearest-even. |f| is capped first so
    // the float → int conversion stays in range whatever the path taken.
    const float scaled = bits_to_f32(std::min(a, 0x3c800000u)) * 512.0f;
    const uint32_t subnormal = uint32_t(int32_t((scaled + 8388608.0f) - 8388608.0f));
    // Selections with masks rather than branches, so the loops calling this vectorise.
    const uint32_t is_normal = 0u - uint32_t(a >= 0x3c800000u);
    const uint32_t saturate = 0u - uint32_t(a >= 0x43e00000u);  // >= 448 and inf ([432, 448) rounds to 0x7E)
    const uint32_t is_nan = 0u - uint32_t(a > 0x7f800000u);
    uint32_t code = (normal & is_normal) | (subnormal & ~is_normal);
    code = ((code & ~saturate) | (0x7eu & saturate)) | sign;
    code = (code & ~is_nan) | (0x7fu & is_nan);
    return fp8e4m3{uint8_t(code)};
}

// FP4 E2M1 code (low 4 bits) → value: 0, .5, 1, 1.5, 2, 3, 4, 6 and negatives.
float fp4e2m1_to_f32(uint8_t code);

// Reads element i of a buffer of the given dtype as float (F32/F16/BF16/F8E4M3 only).
float load_as_f32(const void* data, DType t, size_t i);

}  // namespace qs

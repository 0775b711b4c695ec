// Element types of checkpoints and buffers, and exact scalar conversions between them.
// bf16/f16/fp8-e4m3/fp4-e2m1 are stored as raw bits; conversions round to nearest even,
// which is what the GPU's conversion instructions do, so CPU emulation matches the GPU bit for bit.
#pragma once

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
// Round to nearest even; values beyond ±448 saturate to ±448 (the GPU's satfinite mode).
fp8e4m3 f32_to_fp8e4m3(float f);

// FP4 E2M1 code (low 4 bits) → value: 0, .5, 1, 1.5, 2, 3, 4, 6 and negatives.
float fp4e2m1_to_f32(uint8_t code);

// Reads element i of a buffer of the given dtype as float (F32/F16/BF16/F8E4M3 only).
float load_as_f32(const void* data, DType t, size_t i);

}  // namespace qs

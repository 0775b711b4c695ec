// Scalar conversions for the checkpoint and cache number formats (see dtype.h).
#include "core/dtype.h"

#include <array>
#include <cmath>

#include "core/check.h"

namespace qs {

size_t dtype_size(DType t) {
    switch (t) {
        case DType::kF32: return 4;
        case DType::kF16: return 2;
        case DType::kBF16: return 2;
        case DType::kF8E4M3: return 1;
        case DType::kU8: return 1;
        case DType::kI8: return 1;
        case DType::kI32: return 4;
        case DType::kI64: return 8;
        case DType::kBool: return 1;
    }
    return 0;
}

std::string_view dtype_name(DType t) {
    switch (t) {
        case DType::kF32: return "F32";
        case DType::kF16: return "F16";
        case DType::kBF16: return "BF16";
        case DType::kF8E4M3: return "F8_E4M3";
        case DType::kU8: return "U8";
        case DType::kI8: return "I8";
        case DType::kI32: return "I32";
        case DType::kI64: return "I64";
        case DType::kBool: return "BOOL";
    }
    return "?";
}

std::optional<DType> dtype_from_safetensors_name(std::string_view n) {
    if (n == "F32") return DType::kF32;
    if (n == "F16") return DType::kF16;
    if (n == "BF16") return DType::kBF16;
    if (n == "F8_E4M3") return DType::kF8E4M3;
    if (n == "U8") return DType::kU8;
    if (n == "I8") return DType::kI8;
    if (n == "I32") return DType::kI32;
    if (n == "I64") return DType::kI64;
    if (n == "BOOL") return DType::kBool;
    return std::nullopt;
}

float f16_to_f32(f16 x) {
    uint32_t sign = uint32_t(x.bits & 0x8000u) << 16;
    uint32_t exp = (x.bits >> 10) & 0x1fu;
    uint32_t man = x.bits & 0x3ffu;
    if (exp == 0) {
        float v = std::ldexp(float(man), -24);  // zero or subnormal
        return sign ? -v : v;
    }
    if (exp == 31) return bits_to_f32(sign | 0x7f800000u | (man << 13));  // inf / nan
    return bits_to_f32(sign | ((exp + 112) << 23) | (man << 13));
}

f16 f32_to_f16(float f) {
    uint32_t u = f32_to_bits(f);
    uint16_t sign = uint16_t((u >> 16) & 0x8000u);
    uint32_t a = u & 0x7fffffffu;
    if (a > 0x7f800000u) return f16{uint16_t(sign | 0x7e00u)};
    if (a >= 0x477ff000u) return f16{uint16_t(sign | 0x7c00u)};  // rounds to >= 65520: inf
    if (a < 0x38800000u) {                                        // below the smallest normal
        // Subnormal: value = m * 2^-24; round |f| * 2^24 to nearest even integer.
        float v = std::fabs(f) * 16777216.0f;
        float r = std::nearbyint(v);  // default rounding mode is nearest-even
        return f16{uint16_t(sign | uint16_t(r))};
    }
    uint32_t rounded = a + 0xfffu + ((a >> 13) & 1u);
    return f16{uint16_t(sign | ((rounded - 0x38000000u) >> 13))};
}

float fp8e4m3_to_f32(fp8e4m3 x) {
    uint32_t sign = x.bits & 0x80u;
    uint32_t exp = (x.bits >> 3) & 0xfu;
    uint32_t man = x.bits & 0x7u;
    if (exp == 15 && man == 7) return std::nanf("");
    float v = exp == 0 ? std::ldexp(float(man), -9) : std::ldexp(1.0f + float(man) / 8.0f, int(exp) - 7);
    return sign ? -v : v;
}

const float* fp8e4m3_table() {
    static const auto table = [] {
        std::array<float, 256> t{};
        for (int c = 0; c < 256; ++c) t[size_t(c)] = fp8e4m3_to_f32(fp8e4m3{uint8_t(c)});
        return t;
    }();
    return table.data();
}

float fp4e2m1_to_f32(uint8_t code) {
    static const float kValues[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
    float v = kValues[code & 7u];
    return (code & 8u) ? -v : v;
}

float load_as_f32(const void* data, DType t, size_t i) {
    // Tensors inside safetensors files may be unaligned: read element bytes with memcpy.
    const uint8_t* p = static_cast<const uint8_t*>(data);
    switch (t) {
        case DType::kF32: { float f; std::memcpy(&f, p + 4 * i, 4); return f; }
        case DType::kBF16: { bf16 b; std::memcpy(&b.bits, p + 2 * i, 2); return bf16_to_f32(b); }
        case DType::kF16: { f16 h; std::memcpy(&h.bits, p + 2 * i, 2); return f16_to_f32(h); }
        case DType::kF8E4M3: return fp8e4m3_to_f32(fp8e4m3{p[i]});
        default: QS_CHECK_MSG(false, "load_as_f32: not a float dtype");
    }
    return 0.0f;
}

}  // namespace qs

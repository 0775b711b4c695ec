// NVFP4 device layout (see nvfp4_layout.h).
#include "backend/nvfp4_layout.h"

#include <cmath>
#include <cstring>

#include <fmt/format.h>

#include "core/check.h"
#include "core/dtype.h"

namespace qs {
namespace {

// Whether any of n E4M3 bytes is a NaN ((b & 0x7F) == 0x7F). Eight bytes a step (the byte loop ran
// at ~1.7 GB/s, not vectorised; this at ~10: the layout checks the full-size model's 1.9 GB of
// scales a few times at upload): t has a zero byte exactly where a NaN byte is, and
// (t − 0x01…01) & ~t & 0x80…80 is nonzero exactly when t has a zero byte (t's bytes are below 0x80).
bool has_e4m3_nan(const uint8_t* b, size_t n) {
    uint64_t hit = 0;
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t w;
        std::memcpy(&w, b + i, 8);
        const uint64_t t = ~w & 0x7F7F7F7F7F7F7F7Full;
        hit |= (t - 0x0101010101010101ull) & ~t & 0x8080808080808080ull;
    }
    bool nan = hit != 0;
    for (; i < n; ++i) nan |= (b[i] & 0x7Fu) == 0x7Fu;
    return nan;
}

}  // namespace

std::string nvfp4_layout_unsupported(const LinearWeight& w) {
    if (w.format != WeightFormat::kNvfp4) return fmt::format("format {}", weight_format_name(w.format));
    if (w.in_features <= 0 || w.in_features % 32 != 0)
        return fmt::format("in_features {} not a multiple of 32", w.in_features);
    if (w.scales.dtype != DType::kF8E4M3) return "scale dtype";
    // The kernels widen a scale byte by placing its bits (int4_unpack.cuh scale_f32), which reads
    // the NaN bytes 0x7F and 0xFF as finite numbers: such a weight keeps the BF16 path (NaN there).
    // (Shape-only weights carry no bytes to check.)
    const auto* sc = static_cast<const uint8_t*>(w.scales.data);
    if (sc && has_e4m3_nan(sc, size_t(w.out_features * (w.in_features / kNvfp4GroupSize)))) return "a NaN block scale";
    if (!std::isfinite(w.global_scale) || w.global_scale == 0.0f)
        return fmt::format("global scale {}", w.global_scale);
    if (w.nvfp4_global == Nvfp4Global::kDivide && !std::isfinite(1.0f / w.global_scale))
        return fmt::format("global scale {} has no finite reciprocal", w.global_scale);
    return {};
}

Nvfp4DeviceLayout nvfp4_device_layout(const LinearWeight& w) {
    const std::string why = nvfp4_layout_unsupported(w);
    QS_CHECK_MSG(why.empty(), ("nvfp4_device_layout: " + why).c_str());
    Nvfp4DeviceLayout l;
    l.out = w.out_features;
    l.in = w.in_features;
    l.codes.resize(size_t(l.out * l.in / 8));
    std::memcpy(l.codes.data(), w.weight.data, l.codes.size() * 4);  // bytes [out, in/2] = words [out, in/8]
    const uint8_t* sc = static_cast<const uint8_t*>(w.scales.data);
    l.scales.assign(sc, sc + size_t(l.out * (l.in / kNvfp4GroupSize)));
    l.global = w.nvfp4_global == Nvfp4Global::kMultiply ? w.global_scale : 1.0f / w.global_scale;
    return l;
}

float nvfp4_code_times_scale(uint8_t code, uint8_t scale_byte) {
    return round_to_bf16(fp4e2m1_to_f32(uint8_t(code & 15u)) * bf16_to_f32(f32_to_bf16(fp8e4m3_table()[scale_byte])));
}

void nvfp4_layout_row(const Nvfp4DeviceLayout& l, int64_t row, float* out) {
    const int64_t words = l.in / 8, groups = l.in / kNvfp4GroupSize;
    for (int64_t i = 0; i < l.in; ++i) {
        const uint32_t c = (l.codes[size_t(row * words + i / 8)] >> (4 * (i % 8))) & 15u;
        const float s = fp8e4m3_table()[l.scales[size_t(row * groups + i / kNvfp4GroupSize)]];
        out[i] = (fp4e2m1_to_f32(uint8_t(c)) * s) * l.global;
    }
}

}  // namespace qs

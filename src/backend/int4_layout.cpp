// INT4 device layout (see int4_layout.h).
#include "backend/int4_layout.h"

#include <cstring>

#include <fmt/format.h>

#include "core/check.h"
#include "core/dtype.h"

namespace qs {

namespace {
uint32_t word_at(const void* data, size_t i) {
    uint32_t u;
    std::memcpy(&u, static_cast<const uint8_t*>(data) + 4 * i, 4);
    return u;
}
}  // namespace

std::string int4_layout_unsupported(const LinearWeight& w) {
    if (w.format != WeightFormat::kIntGroup) return fmt::format("format {}", weight_format_name(w.format));
    const IntGroupParams& p = w.int_params;
    if (p.bits != 4) return fmt::format("{} bits", p.bits);
    if (w.zeros.data) {
        // GPTQ/AutoRound store zero points even for symmetric weights: accept them when every
        // effective zero is 8 (the symmetric value the layout implies).
        const int64_t groups = p.groups(w.in_features), zw = (w.out_features + 7) / 8;
        const bool gptq = p.packing == IntPacking::kGptq;
        for (int64_t o = 0; o < w.out_features; ++o)
            for (int64_t g = 0; g < groups; ++g) {
                const size_t word = gptq ? size_t(g * zw + o / 8) : size_t((o / 8) * groups + g);
                const int z = int((word_at(w.zeros.data, word) >> (4 * (o % 8))) & 15u) + p.zero_offset;
                if (z != 8) return "asymmetric (zero points)";
            }
    }
    if (w.g_idx.data) return "g_idx (act-order)";
    const int64_t in = w.in_features, g = p.group_size;
    if (in <= 0 || in % 32 != 0) return fmt::format("in_features {} not a multiple of 32", in);
    if (g <= 0 || g % 8 != 0 || in % g != 0)
        return fmt::format("group size {} (a multiple of 8 dividing in_features {} is needed)", g, in);
    if (w.scales.dtype != DType::kBF16 && w.scales.dtype != DType::kF16 && w.scales.dtype != DType::kF32)
        return "scale dtype";
    if (w.scales.dtype != DType::kBF16) {
        for (int64_t i = 0; i < w.scales.numel(); ++i) {
            const float s = load_as_f32(w.scales.data, w.scales.dtype, size_t(i));
            if (round_to_bf16(s) != s) return fmt::format("scale {} is not a bf16 value", s);
        }
    }
    return {};
}

Int4DeviceLayout int4_device_layout(const LinearWeight& w) {
    const std::string why = int4_layout_unsupported(w);
    QS_CHECK_MSG(why.empty(), ("int4_device_layout: " + why).c_str());
    Int4DeviceLayout l;
    l.out = w.out_features;
    l.in = w.in_features;
    l.group = w.int_params.group_size;
    const int64_t words = l.in / 8, groups = l.in / l.group;
    l.codes.resize(size_t(l.out * words));
    l.scales.resize(size_t(l.out * groups));
    const bool gptq = w.int_params.packing == IntPacking::kGptq;
    // u = q + 8 → q's two's complement nibble: u ^ 8 in every nibble.
    constexpr uint32_t kSigned = 0x88888888u;
    if (!gptq) {
        for (size_t i = 0; i < l.codes.size(); ++i) l.codes[i] = word_at(w.weight.data, i) ^ kSigned;  // [out, in/8]
    } else {
        // qweight [in/8, out]: word (k, o) holds inputs 8k..8k+7 of row o in the same bit order.
        for (int64_t k = 0; k < words; ++k)
            for (int64_t o = 0; o < l.out; ++o)
                l.codes[size_t(o * words + k)] = word_at(w.weight.data, size_t(k * l.out + o)) ^ kSigned;
    }
    for (int64_t o = 0; o < l.out; ++o)
        for (int64_t g = 0; g < groups; ++g) {
            const size_t src = gptq ? size_t(g * l.out + o) : size_t(o * groups + g);
            l.scales[size_t(o * groups + g)] = f32_to_bf16(load_as_f32(w.scales.data, w.scales.dtype, src)).bits;
        }
    return l;
}

void int4_layout_row(const Int4DeviceLayout& l, int64_t row, float* out) {
    const int64_t words = l.in / 8, groups = l.in / l.group;
    for (int64_t i = 0; i < l.in; ++i) {
        const uint32_t c = (l.codes[size_t(row * words + i / 8)] >> (4 * (i % 8))) & 15u;
        const int32_t q = c < 8 ? int32_t(c) : int32_t(c) - 16;  // two's complement
        const float s = bf16_to_f32(bf16{l.scales[size_t(row * groups + i / l.group)]});
        out[i] = float(q) * s;
    }
}

}  // namespace qs

// Reference dequantisation of linear weights, per storage format (see linear_weight.h).
#include "backend/linear_weight.h"

#include <algorithm>
#include <cstring>

#include "core/check.h"

namespace qs {

namespace {

uint32_t load_u32(const void* data, size_t i) {
    uint32_t u;
    std::memcpy(&u, static_cast<const uint8_t*>(data) + 4 * i, 4);
    return u;
}

// Row `row` of a grouped-integer weight (see IntGroupParams for the formula).
void int_group_row(const LinearWeight& w, int64_t row, float* out) {
    const IntGroupParams& p = w.int_params;
    const int64_t in = w.in_features, out_n = w.out_features, pack = p.pack(), groups = p.groups(in);
    const uint32_t mask = (1u << p.bits) - 1u;
    const bool gptq = p.packing == IntPacking::kGptq;
    const int64_t zero_words = (out_n + pack - 1) / pack;  // packed length of an output run
    const int zero_shift = int(row % pack) * p.bits;
    auto zero_of = [&](int64_t g) -> int32_t {
        if (!w.zeros.data) return int32_t(1) << (p.bits - 1);
        const size_t word = gptq ? size_t(g * zero_words + row / pack) : size_t((row / pack) * groups + g);
        return int32_t((load_u32(w.zeros.data, word) >> zero_shift) & mask) + p.zero_offset;
    };
    auto scale_of = [&](int64_t g) {
        return load_as_f32(w.scales.data, w.scales.dtype, gptq ? size_t(g * out_n + row) : size_t(row * groups + g));
    };
    const int64_t row_words = (in + pack - 1) / pack;
    int64_t cached_g = -1;
    float s = 0.0f;
    int32_t z = 0;
    for (int64_t i = 0; i < in; ++i) {
        int64_t g = i / p.group_size;
        if (w.g_idx.data) g = int32_t(load_u32(w.g_idx.data, size_t(i)));
        if (g != cached_g) {
            s = scale_of(g);
            z = zero_of(g);
            cached_g = g;
        }
        const size_t word = gptq ? size_t((i / pack) * out_n + row) : size_t(row * row_words + i / pack);
        const int32_t q = int32_t((load_u32(w.weight.data, word) >> (int(i % pack) * p.bits)) & mask);
        out[i] = float(q - z) * s;
    }
}

void nvfp4_row(const LinearWeight& w, int64_t row, float* out) {
    const int64_t in = w.in_features, nb = in / kNvfp4GroupSize;
    const uint8_t* q = static_cast<const uint8_t*>(w.weight.data) + size_t(row) * size_t(in / 2);
    const uint8_t* sc = static_cast<const uint8_t*>(w.scales.data) + size_t(row * nb);
    const float* e4m3 = fp8e4m3_table();
    float e2m1[16];
    for (uint8_t c = 0; c < 16; ++c) e2m1[c] = fp4e2m1_to_f32(c);
    // ModelOpt's E2M1 table decodes code 8 as +0 (compressed-tensors as -0): follow each library.
    if (w.nvfp4_global == Nvfp4Global::kMultiply) e2m1[8] = 0.0f;
    for (int64_t b = 0; b < nb; ++b) {
        const float s = w.nvfp4_global == Nvfp4Global::kMultiply ? e4m3[sc[b]] * w.global_scale
                                                                  : e4m3[sc[b]] / w.global_scale;
        for (int64_t j = 0; j < kNvfp4GroupSize / 2; ++j) {
            const uint8_t byte = q[b * kNvfp4GroupSize / 2 + j];
            out[b * kNvfp4GroupSize + 2 * j] = e2m1[byte & 15u] * s;
            out[b * kNvfp4GroupSize + 2 * j + 1] = e2m1[byte >> 4] * s;
        }
    }
}

}  // namespace

int64_t WeightBuffer::numel() const {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return n;
}

WeightBuffer WeightBuffer::slice(int64_t element_offset, std::vector<int64_t> new_shape) const {
    WeightBuffer out;
    out.dtype = dtype;
    out.shape = std::move(new_shape);
    QS_CHECK(element_offset >= 0 && element_offset + out.numel() <= numel());
    out.data = static_cast<const uint8_t*>(data) + size_t(element_offset) * dtype_size(dtype);
    out.owner = owner;
    return out;
}

void LinearWeight::row_to_f32(int64_t row, float* out) const {
    QS_CHECK(row >= 0 && row < out_features);
    switch (format) {
        case WeightFormat::kDense: {
            // Checkpoint tensors are packed back to back and may be unaligned: copy, then widen.
            const size_t esize = dtype_size(weight.dtype);
            const uint8_t* src = static_cast<const uint8_t*>(weight.data) + size_t(row) * size_t(in_features) * esize;
            switch (weight.dtype) {
                case DType::kF32:
                    std::memcpy(out, src, size_t(in_features) * 4);
                    return;
                case DType::kBF16: {
                    uint16_t chunk[256];
                    for (int64_t i0 = 0; i0 < in_features; i0 += 256) {
                        const int64_t n = std::min<int64_t>(256, in_features - i0);
                        std::memcpy(chunk, src + 2 * size_t(i0), size_t(n) * 2);
                        for (int64_t i = 0; i < n; ++i) out[i0 + i] = bits_to_f32(uint32_t(chunk[i]) << 16);
                    }
                    return;
                }
                case DType::kF16: {
                    for (int64_t i = 0; i < in_features; ++i) {
                        f16 h;
                        std::memcpy(&h.bits, src + 2 * size_t(i), 2);
                        out[i] = f16_to_f32(h);
                    }
                    return;
                }
                default: QS_CHECK_MSG(false, "dense linear weight must be F32, F16 or BF16");
            }
            return;
        }
        case WeightFormat::kFP8Block: {
            QS_CHECK(weight.dtype == DType::kF8E4M3);
            const int64_t nb = fp8_num_blocks(in_features);
            const int64_t srow = row / kFp8BlockSize;
            const uint8_t* q = static_cast<const uint8_t*>(weight.data) + size_t(row) * size_t(in_features);
            const float* lut = fp8e4m3_table();
            for (int64_t b = 0; b < nb; ++b) {
                const float s = load_as_f32(scale_inv.data, scale_inv.dtype, size_t(srow * nb + b));
                const int64_t c0 = b * kFp8BlockSize, c1 = std::min(in_features, c0 + kFp8BlockSize);
                for (int64_t c = c0; c < c1; ++c) out[c] = lut[q[c]] * s;
            }
            return;
        }
        case WeightFormat::kIntGroup: int_group_row(*this, row, out); return;
        case WeightFormat::kNvfp4: nvfp4_row(*this, row, out); return;
    }
}

std::vector<float> LinearWeight::scale_inv_f32() const {
    QS_CHECK(format == WeightFormat::kFP8Block);
    QS_CHECK(scale_inv.numel() == fp8_num_blocks(out_features) * fp8_num_blocks(in_features));
    return to_f32_vector(scale_inv);
}

LinearWeight leading_rows(const LinearWeight& w, int64_t rows) {
    QS_CHECK_MSG(leading_rows_supported(w), "leading_rows: only dense and FP8-block weights are row-major prefixes");
    QS_CHECK(rows >= 1 && rows <= w.out_features);
    LinearWeight v = w;
    v.out_features = rows;
    v.weight = w.weight.slice(0, {rows, w.in_features});
    if (w.format == WeightFormat::kFP8Block) {
        const int64_t block_cols = w.scale_inv.shape.at(1);
        v.scale_inv = w.scale_inv.slice(0, {fp8_num_blocks(rows), block_cols});
    }
    return v;
}

size_t LinearWeight::storage_bytes() const {
    size_t n = size_t(weight.numel()) * dtype_size(weight.dtype);
    if (format == WeightFormat::kFP8Block) n += size_t(scale_inv.numel()) * dtype_size(scale_inv.dtype);
    for (const WeightBuffer* b : {&scales, &zeros, &g_idx})
        if (b->data) n += size_t(b->numel()) * dtype_size(b->dtype);
    return n;
}

const char* weight_format_name(WeightFormat f) {
    switch (f) {
        case WeightFormat::kDense: return "dense";
        case WeightFormat::kFP8Block: return "fp8-block";
        case WeightFormat::kIntGroup: return "int-group";
        case WeightFormat::kNvfp4: return "nvfp4";
    }
    return "?";
}

std::vector<float> to_f32_vector(const WeightBuffer& buffer) {
    std::vector<float> out(size_t(buffer.numel()));
    for (size_t i = 0; i < out.size(); ++i) out[i] = load_as_f32(buffer.data, buffer.dtype, i);
    return out;
}

}  // namespace qs

// Reference dequantisation of linear weights, per storage format (see linear_weight.h).
#include "backend/linear_weight.h"

#include <algorithm>
#include <cstring>

#include "core/check.h"

namespace qs {

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
    }
}

std::vector<float> LinearWeight::scale_inv_f32() const {
    QS_CHECK(format == WeightFormat::kFP8Block);
    QS_CHECK(scale_inv.numel() == fp8_num_blocks(out_features) * fp8_num_blocks(in_features));
    return to_f32_vector(scale_inv);
}

size_t LinearWeight::storage_bytes() const {
    size_t n = size_t(weight.numel()) * dtype_size(weight.dtype);
    if (format == WeightFormat::kFP8Block) n += size_t(scale_inv.numel()) * dtype_size(scale_inv.dtype);
    return n;
}

const char* weight_format_name(WeightFormat f) {
    switch (f) {
        case WeightFormat::kDense: return "dense";
        case WeightFormat::kFP8Block: return "fp8-block";
    }
    return "?";
}

std::vector<float> to_f32_vector(const WeightBuffer& buffer) {
    std::vector<float> out(size_t(buffer.numel()));
    for (size_t i = 0; i < out.size(); ++i) out[i] = load_as_f32(buffer.data, buffer.dtype, i);
    return out;
}

}  // namespace qs

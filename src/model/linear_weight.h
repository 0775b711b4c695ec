// LinearWeight: one linear layer y = x · Wᵀ (W is [out_features, in_features]) in whatever
// storage format the checkpoint uses. The forward pass only ever sees "a linear with format X";
// each format has a CPU dequantisation here (the reference) and, later, a CUDA kernel.
// Weight formats are a loading concern (spec §4): dense F32/F16/BF16 now; FP8 128×128 block,
// INT4 W4A16 (GPTQ/AutoRound) and NVFP4 plug in as further WeightFormat values.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/dtype.h"

namespace qs {

// A read-only buffer of weights: a view into an mmap'd checkpoint or storage owned here.
struct WeightBuffer {
    DType dtype = DType::kF32;
    std::vector<int64_t> shape;
    const void* data = nullptr;
    std::shared_ptr<const void> owner;  // keeps `data` alive (a Checkpoint or a heap block)

    int64_t numel() const;
    // A contiguous sub-range [offset, offset + numel(new_shape)) of this buffer with a new shape.
    WeightBuffer slice(int64_t element_offset, std::vector<int64_t> new_shape) const;
};

enum class WeightFormat : uint8_t {
    kDense,  // weight [out, in] in F32, F16 or BF16
};

struct LinearWeight {
    WeightFormat format = WeightFormat::kDense;
    int64_t out_features = 0;
    int64_t in_features = 0;
    WeightBuffer weight;  // kDense: [out_features, in_features]

    // Writes row `row` of W (in_features values) as float32: the format's reference dequant.
    void row_to_f32(int64_t row, float* out) const;
    // Bytes of weight storage (for capacity reports).
    size_t storage_bytes() const;
};

// Reads a small parameter vector (norm weights, A_log, ...) as float32.
std::vector<float> to_f32_vector(const WeightBuffer& buffer);

}  // namespace qs

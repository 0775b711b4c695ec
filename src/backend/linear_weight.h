// LinearWeight: one linear layer y = x · Wᵀ (W is [out_features, in_features]) in whatever
// storage format the checkpoint uses. The forward pass only ever sees "a linear with format X";
// each format has a CPU dequantisation here (the reference) and a CUDA kernel that reads the same
// buffers. Weight formats are a loading concern (spec §4): dense F32/F16/BF16 and FP8 E4M3 with
// 128×128 block scales (Qwen's official FP8; its quantiser is model/fp8_block.h); INT4 W4A16
// (GPTQ/AutoRound) and NVFP4 plug in as further WeightFormat values. A backend type: the ops take
// these views; loading and writing them is model/'s.
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

// The FP8 block format's block edge: one scale per 128×128 block of W.
constexpr int64_t kFp8BlockSize = 128;

// Blocks along a dimension of n elements: ⌈n / 128⌉.
inline int64_t fp8_num_blocks(int64_t n) { return (n + kFp8BlockSize - 1) / kFp8BlockSize; }

enum class WeightFormat : uint8_t {
    kDense,     // weight [out, in] in F32, F16 or BF16
    kFP8Block,  // weight [out, in] F8_E4M3 + scale_inv [⌈out/128⌉, ⌈in/128⌉] F32 or BF16
};

// "dense" / "fp8-block" (as in the CLI flags).
const char* weight_format_name(WeightFormat f);

struct LinearWeight {
    WeightFormat format = WeightFormat::kDense;
    int64_t out_features = 0;
    int64_t in_features = 0;
    // kDense:    [out_features, in_features] F32/F16/BF16.
    // kFP8Block: [out_features, in_features] F8_E4M3 codes, row-major.
    WeightBuffer weight;
    // kFP8Block only: [⌈out_features/128⌉, ⌈in_features/128⌉] row-major, F32 or BF16 as stored in
    // the checkpoint (converted where used: scale_inv_f32). A multiplier despite its name:
    // W[i][j] = fp8(weight[i][j]) · scale_inv[i / 128][j / 128], the product in float32.
    WeightBuffer scale_inv;

    // Writes row `row` of W (in_features values) as float32: the format's reference dequant.
    void row_to_f32(int64_t row, float* out) const;
    // kFP8Block: scale_inv as float32 values, [⌈out/128⌉ · ⌈in/128⌉] row-major (what a device
    // upload wants whatever the checkpoint stored).
    std::vector<float> scale_inv_f32() const;
    // Bytes of weight storage, scales included (for capacity reports).
    size_t storage_bytes() const;
};

// Reads a small parameter vector (norm weights, A_log, ...) as float32.
std::vector<float> to_f32_vector(const WeightBuffer& buffer);

}  // namespace qs

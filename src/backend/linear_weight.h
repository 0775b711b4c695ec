// LinearWeight: one linear layer y = x · Wᵀ (W is [out_features, in_features]) in whatever
// storage format the checkpoint uses. The forward pass only ever sees "a linear with format X";
// each format has a CPU dequantisation here (the reference) and a CUDA kernel that reads the same
// buffers. Weight formats are a loading concern (spec §4): dense F32/F16/BF16 and FP8 E4M3 with
// 128×128 block scales (Qwen's official FP8; its quantiser is model/fp8_block.h), grouped
// integers (INT4/INT8 W4A16 as GPTQ, AutoRound and compressed-tensors pack them) and NVFP4
// (ModelOpt and compressed-tensors). A backend type: the ops take these views; loading and
// writing them is model/'s (model/quant_formats.h names the checkpoint tensors).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "backend/weight_handle.h"
#include "core/dtype.h"

namespace qs {

// A read-only buffer of weights: a view into an mmap'd checkpoint or storage owned here.
struct WeightBuffer {
    DType dtype = DType::kF32;
    std::vector<int64_t> shape;
    const void* data = nullptr;
    std::shared_ptr<const void> owner;  // keeps `data` alive (a Checkpoint or a heap block)
    // An embedding table's backend copy (weight_handle.h); unset for the buffers inside a
    // LinearWeight, which the LinearWeight's handle covers. slice() leaves it unset.
    WeightHandle handle{};

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
    kIntGroup,  // 4- or 8-bit integer codes packed in I32 words + one scale (and zero) per group
    kNvfp4,     // FP4 E2M1 codes two per byte + one E4M3 scale per 16 inputs + one F32 global scale
};

// "dense" / "fp8-block" / "int-group" / "nvfp4".
const char* weight_format_name(WeightFormat f);

// The two packings of grouped-integer weights in published checkpoints. In both, code i of a
// packed run sits in word i / (32/bits) at bit (i % (32/bits))·bits (lowest bits first).
enum class IntPacking : uint8_t {
    // GPTQ / AutoRound "auto_gptq": qweight I32 [⌈in/pack⌉, out] (packed along the input),
    // scales [groups, out], qzeros I32 [groups, ⌈out/pack⌉] (packed along the output).
    kGptq,
    // compressed-tensors "pack-quantized": weight_packed I32 [out, ⌈in/pack⌉], weight_scale
    // [out, groups], weight_zero_point I32 [⌈out/pack⌉, groups] (packed along the output).
    kCompressed,
};

// Parameters of a kIntGroup weight. W[o][i] = (code[o][i] − zero[o][g]) · scale[o][g], the
// difference an exact integer and the product rounded once to float32, where g = g_idx[i] when
// the weight has a g_idx (GPTQ act-order) and i / group_size otherwise; zero = the stored zero
// code + zero_offset when the weight has zeros (asymmetric), else 2^(bits−1).
struct IntGroupParams {
    IntPacking packing = IntPacking::kGptq;
    int bits = 4;                // 4 or 8
    int64_t group_size = 128;    // inputs per group (in_features for one group per row)
    int zero_offset = 0;         // GPTQ v1 checkpoints store zero − 1: offset 1
    int64_t pack() const { return 32 / bits; }
    int64_t groups(int64_t in_features) const { return (in_features + group_size - 1) / group_size; }
};

// How an NVFP4 weight's global scale combines with its E4M3 block scales: the effective block
// scale is fp32(e4m3) · global (ModelOpt's weight_scale_2) or fp32(e4m3) / global
// (compressed-tensors' weight_global_scale), rounded once to float32; then
// W[o][i] = e2m1(code[o][i]) · effective scale, rounded once (the libraries' order). Code 8 (−0)
// decodes as +0 with kMultiply (ModelOpt's table) and −0 with kDivide (compressed-tensors').
enum class Nvfp4Global : uint8_t { kMultiply, kDivide };

constexpr int64_t kNvfp4GroupSize = 16;

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
    // kIntGroup: `weight` holds the packed I32 codes (layout: int_params.packing); `scales` the
    // F16/BF16/F32 group scales; `zeros` the packed I32 zero codes (empty: symmetric); `g_idx`
    // I32 [in_features] (empty: i / group_size).
    // kNvfp4: `weight` U8 [out, in/2], element 2j in the low nibble of byte j, 2j+1 in the high;
    // `scales` F8_E4M3 [out, in/16]; `global_scale` as nvfp4_global says.
    WeightBuffer scales, zeros, g_idx;
    IntGroupParams int_params;
    float global_scale = 1.0f;
    Nvfp4Global nvfp4_global = Nvfp4Global::kMultiply;
    // The backend's copy of this linear (weight_handle.h); set when a WeightSet lists it.
    WeightHandle handle{};

    // Writes row `row` of W (in_features values) as float32: the format's reference dequant.
    void row_to_f32(int64_t row, float* out) const;
    // kFP8Block: scale_inv as float32 values, [⌈out/128⌉ · ⌈in/128⌉] row-major (what a device
    // upload wants whatever the checkpoint stored).
    std::vector<float> scale_inv_f32() const;
    // Bytes of weight storage, scales included (for capacity reports).
    size_t storage_bytes() const;
};

// Whether leading_rows takes w: dense and FP8-block weights are row-major, so their first rows
// (and the block scales' first block rows) are a prefix of their storage.
inline bool leading_rows_supported(const LinearWeight& w) {
    return w.format == WeightFormat::kDense || w.format == WeightFormat::kFP8Block;
}
// W's first `rows` output features (1 <= rows <= out_features): a view of the same storage, with
// the same handle (the backend's copy is the whole weight's; Ops::linear_leading_rows).
LinearWeight leading_rows(const LinearWeight& w, int64_t rows);

// A dense linear [out, in] over `weight`.
inline LinearWeight dense_linear(int64_t out, int64_t in, WeightBuffer weight) {
    LinearWeight w;
    w.out_features = out;
    w.in_features = in;
    w.weight = std::move(weight);
    return w;
}

// Reads a small parameter vector (norm weights, A_log, ...) as float32.
std::vector<float> to_f32_vector(const WeightBuffer& buffer);

}  // namespace qs

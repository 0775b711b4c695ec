// Dense linears for a handful of rows (decode): y [T, out] = x [T, in] · Wᵀ for T ≤ 8, reading
// the weight once from DRAM and x (fp32, not rounded) from L1/L2. At these sizes cuBLASLt's
// GEMMs cost ≥ 20 µs per call whatever the weight size (bench/kernels/NOTES.md), plus a launch
// to round or quantise x; this kernel streams W at close to copy bandwidth in one launch.
// BF16 weights, or FP8 e4m3 with 128×128 block scales (scale_inv [ceil(out/128), ceil(in/128)],
// W = w · scale). fp32 products and accumulation: each row's result depends only on its own x
// (no tiling across rows), so it is the same whatever the batch around it.
// One warp per output feature, 16-byte weight loads. CPU reference: cpu::linear.
// Included from g++-compiled code: no device-only syntax here.
#pragma once

#include <cstdint>

#include <cuda_runtime.h>

namespace qs::cuda {

constexpr int64_t kSmallLinearMaxRows = 8;

// Whether the kernel takes this call: T in [1, 8], `in` a multiple of 256 (bf16) or 512 (fp8),
// W and x 16-byte aligned.
bool small_linear_supports(bool fp8, int64_t T, int64_t in, const void* w, const float* x);

// w [out, in] bf16 (fp8 = false) or fp8 e4m3 with scale_inv; x [T, in], y [T, out] fp32.
void launch_small_linear(const void* w, bool fp8, const float* scale_inv, int64_t out, int64_t in, const float* x,
                         int64_t T, float* y, cudaStream_t stream);

}  // namespace qs::cuda

// Dense linears for one or two rows (single-stream decode): y [T, out] = x [T, in] · Wᵀ, reading
// the weight once from DRAM and x from L1/L2, in one launch. At these sizes cuBLASLt's GEMMs cost
// ≥ 18 µs per call whatever the weight size (bench/kernels/NOTES.md), plus a launch to round or
// quantise x. From 4 rows on cuBLASLt is as fast or faster (every warp re-reads all rows of x).
// x is rounded exactly as the cuBLASLt path for the same weights does it, so a row's result does
// not depend on which path its batch size picks (only the fp32 summation order differs):
//  - BF16 weights: x rounded to bf16 (round to nearest even);
//  - FP8 e4m3 with 128×128 block scales (scale_inv [ceil(out/128), ceil(in/128)], W = w · scale):
//    x quantised to e4m3 per row and 128-column group with scale amax/448, as
//    launch_quant_fp8_rows128 does for the block-scaled GEMM.
// fp32 products and sums. One warp per output feature, 16-byte weight loads. CPU reference:
// cpu::linear (on the rounded x).
// Included from g++-compiled code: no device-only syntax here.
#pragma once

#include <cstdint>
#include <span>

#include <cuda_runtime.h>

namespace qs::cuda {

constexpr int64_t kSmallLinearMaxRows = 2;

// Whether the kernel takes this call: T in [1, 2] (bf16) or 1 (fp8), `in` a multiple of 256 (bf16) or 512 (fp8),
// W and x 16-byte aligned.
bool small_linear_supports(bool fp8, int64_t T, int64_t in, const void* w, const float* x);

// w [out, in] bf16 (fp8 = false) or fp8 e4m3 with scale_inv; x [T, in], y [T, out] fp32.
void launch_small_linear(const void* w, bool fp8, const float* scale_inv, int64_t out, int64_t in, const float* x,
                         int64_t T, float* y, cudaStream_t stream);

// Version 2, FP8 only (small_linear_fp8.cu; taken when CudaOptions::fp8_small_rows >= T): 1..4 rows
// (an MTP verify of k + 1 rows for k <= 3), x quantised once per block into shared memory with
// launch_quant_fp8_rows128's exact operations instead of once per output feature, the weight
// streamed once for all rows. A row's result does not depend on T (bitwise). Needs `in` a
// multiple of 512 and T · in · 4 + T · in / 32 bytes of shared memory <= 100 KiB (at T = 4: in <=
// 6,300; the model's dense linears have in = 2,048 or 4,096).
constexpr int64_t kSmallLinearFp8V2MaxRows = 4;
bool small_linear_fp8_v2_supports(int64_t T, int64_t in, const void* w, const float* x);
// Up to 4 weights of one input in one launch (the q/k/v and the GDN qkv/z projections): x is
// quantised once per block for all of them; each weight's result is the same bits as its own launch.
constexpr int kSmallLinearFp8V2MaxParts = 4;
struct SmallLinearFp8Part {
    const void* w = nullptr;            // [out, in] e4m3
    const float* scale_inv = nullptr;   // [ceil(out / 128), in / 128]
    int64_t out = 0;
    float* y = nullptr;                 // [T, out]
};
// The layer's input norm computed in the launch's prologue (CudaOptions::fused_input_norm): the
// weights then read h = rms_norm_zc(x + pending) instead of x, every block computing h of the T rows
// itself with row_norm.cuh's arithmetic and thread mapping, so h is bitwise what
// launch_residual_rms_norm_zc(x, pending, nullptr, nullptr, w, ...) writes and each y bitwise that
// of a launch on that h; block 0 also stores h (for the launches that read it next: the GDN b/a
// projections). x is not written. Saves the norm's own launch (~3 µs of a one-stream step's GDN
// layer: bench/kernels/NOTES.md "One stream from a real timeline").
struct SmallLinearInputNorm {
    const float* pending = nullptr;  // [T, in] added to x first, or null
    const float* w = nullptr;        // [in] the norm's weight
    float eps = 0.0f;
    float* h = nullptr;              // [T, in] out: the normalised rows
};
// Whether a launch with the norm takes T rows of `in` columns (in = 2,048 or 4,096).
bool small_linear_fp8_v2_norm_supports(int64_t T, int64_t in);
// The post-attention norm after a launch of one weight (the o_proj / GDN out_proj; CudaOptions::
// fused_output_norm): x += pending (when not null), x += y, h = rms_norm_zc(x), computed by the
// launch's last block to finish (each block counts itself on `counter`, 0 before and after) with
// row_norm.cuh's arithmetic and thread mapping, so x and h are bitwise what
// launch_residual_rms_norm_zc(x, pending, y, x, w, ...) writes after the launch. y [T, out] is the
// launch's output (out = 2,048 or 4,096 columns: the row width of x). Saves the norm's own launch.
struct SmallLinearOutputNorm {
    float* x = nullptr;              // [T, out] the residual, updated
    const float* pending = nullptr;  // [T, out] or null
    const float* w = nullptr;        // [out] the norm's weight
    float eps = 0.0f;
    float* h = nullptr;              // [T, out] out: the normalised rows
    int* counter = nullptr;          // one int, 0 between launches
};
bool small_linear_fp8_v2_output_norm_supports(int64_t T, int64_t out);
// One weight with the norm after it.
void launch_small_linear_fp8_v2_output_norm(const SmallLinearFp8Part& part, int64_t in, const float* x_in, int64_t T,
                                            const SmallLinearOutputNorm& norm, cudaStream_t stream,
                                            int blocks_per_sm = 2);
// blocks_per_sm: the grid is min(ceil(Σ out / 8), SMs × blocks_per_sm) blocks of 8 warps, each
// quantising x once (labs sweep it; 2 by default: at 80-96 registers a thread, two blocks of 256
// threads fit an SM, so the grid is one wave). norm: null, or the input norm above.
void launch_small_linear_fp8_v2(std::span<const SmallLinearFp8Part> parts, int64_t in, const float* x, int64_t T,
                                cudaStream_t stream, int blocks_per_sm = 2,
                                const SmallLinearInputNorm* norm = nullptr);
// One weight.
void launch_small_linear_fp8_v2(const void* w, const float* scale_inv, int64_t out, int64_t in, const float* x,
                                int64_t T, float* y, cudaStream_t stream, int blocks_per_sm = 2);

// Version 3 (small_linear_fp8_mma.cu; Gemm takes it with CudaOptions::fp8_small_version 3): the
// same quantised x, the products on tensor cores (mma.sync m16n8k16 on exact f16 copies of the
// e4m3 codes, fp32 accumulation), a block of 8 warps per 16 output features. Same products as
// version 2, the fp32 sums in another order. Needs `in` a multiple of 512 up to 4,096; any row
// count (a part's last group of 16 may be partly padding). blocks_per_sm 0: one block per 16
// features (no grid cap).
// The norms as in version 2 (the same code: small_linear_fp8_norms.cuh, so h and x are the same
// bits): the input norm with in = 2,048 or 4,096; the output norm with in and out of 2,048 or 4,096.
bool small_linear_fp8_mma_supports(int64_t T, int64_t in, std::span<const SmallLinearFp8Part> parts, const float* x);
bool small_linear_fp8_mma_norm_supports(int64_t T, int64_t in);
bool small_linear_fp8_mma_output_norm_supports(int64_t T, int64_t in, int64_t out);
void launch_small_linear_fp8_mma(std::span<const SmallLinearFp8Part> parts, int64_t in, const float* x, int64_t T,
                                 cudaStream_t stream, int blocks_per_sm = 0,
                                 const SmallLinearInputNorm* norm = nullptr);
void launch_small_linear_fp8_mma_output_norm(const SmallLinearFp8Part& part, int64_t in, const float* x_in, int64_t T,
                                             const SmallLinearOutputNorm& norm, cudaStream_t stream,
                                             int blocks_per_sm = 0);

// fp32 weights (small_linear_f32.cu; the unquantised GDN b/a projections, the router and the
// shared-expert gate): up to 4 weights of one input in one launch, 1..8 rows. cuBLAS's fp32
// GEMV takes two launches per weight at these sizes (dot/gemv, then a reduction) and most of a
// one-row decode step is such latency. fp32 products and sums, each row's result independent of T
// and of the other weights in the launch. Needs `in` a multiple of 128 and W, x 16-byte aligned.
constexpr int64_t kSmallLinearF32MaxRows = 8;
constexpr int kSmallLinearF32MaxParts = 4;
struct SmallLinearF32Part {
    const float* w = nullptr;  // [out, in]
    int64_t out = 0;
    float* y = nullptr;        // [T, out]
};
bool small_linear_f32_supports(int64_t T, int64_t in, const void* w, const float* x);
void launch_small_linear_f32(std::span<const SmallLinearF32Part> parts, int64_t in, const float* x, int64_t T,
                             cudaStream_t stream);

// The same fp32 linears for any T (f32_linear_tiles.cu): every output the bits launch_small_linear_f32
// gives it (its slices, leaves and butterfly, reproduced per output), so a row's result does not
// depend on T; cuBLAS's fp32 GEMM/GEMV sums in another order (and took 8.9 µs a GDN b or a call at
// 512 rows). Warps compute 8 × 8 output tiles; `variant` picks the block tile (0: 8 × 8, slices
// over the warps; 1: 16 × 16; 2: 32 × 16; 3: 16 × 32, rows × features), −1: f32_linear_tile_variant
// (the largest tile that still gives ~90 % of the SMs a block).
constexpr int64_t kF32LinearTilesMaxRows = 16384;
// Gemm takes it for a weight of `out` features at T rows only while T·out <= this: cuBLAS's fp32 GEMM
// wins on wide outputs (f32_linear_lab, H100: the router's 257 features at 512 rows 24 µs against
// 44-54; the GDN b/a pair's 2 × 32 at 512 rows 19.4 against 10.1, at 1,024 25.2 against 17.0).
constexpr int64_t kF32LinearTilesMaxOutputs = 32768;
constexpr int kF32LinearTileVariants = 4;
bool f32_linear_tiles_supports(int64_t T, int64_t in, const void* w, const float* x);
int f32_linear_tile_variant(int64_t T, int64_t features, int sm_count);
void launch_f32_linear_tiles(std::span<const SmallLinearF32Part> parts, int64_t in, const float* x, int64_t T,
                             cudaStream_t stream, int variant = -1, int sm_count = 132);

}  // namespace qs::cuda

// Elementwise and row kernels of the CUDA backend: the counterparts of backend/cpu/cpu_basic.cpp
// (embed, zero-centred RMSNorm, add, gather_rows, concat_columns) plus the conversions the GEMM
// path needs. All activations fp32 row-major. Launchers enqueue on `stream` and never sync.
#pragma once

#include <cstdint>

#include <cuda_runtime.h>

namespace qs::cuda {

enum class TableDtype : uint8_t { kF32, kBF16, kF16 };

// x [T, H] = table[ids[t]] for a table [V, H] of `dtype`; ids on the device.
void launch_embed(const void* table, TableDtype dtype, const int32_t* ids, int64_t T, int64_t H, float* x,
                  cudaStream_t stream);
// y = x · rsqrt(mean(x²) + eps) · (1 + w) per row; x, y [T, n] (y may equal x); w [n].
void launch_rms_norm_zc(const float* x, const float* w, int64_t T, int64_t n, float eps, float* y,
                        cudaStream_t stream);
// x += y, n elements.
void launch_add(float* x, const float* y, int64_t n, cudaStream_t stream);
// x += y, then out = x · rsqrt(mean(x²) + eps) · (1 + w) per row, in one pass: x, y, out [T, n],
// w [n]. out may equal x (the sum is then not kept: the final norm); y must not overlap out.
// Bitwise equal to launch_add then launch_rms_norm_zc (the same fp32 sum, the same order of the
// sum of squares); rows longer than kAddRmsNormMaxCols take those two kernels.
inline constexpr int64_t kAddRmsNormMaxCols = 4096;
void launch_add_rms_norm_zc(float* x, const float* y, const float* w, int64_t T, int64_t n, float eps, float* out,
                            cudaStream_t stream);
// The same pass in general: v = x (+ y1) (+ y2) per element (y1, y2 null: no addend), x_out = v when
// x_out is not null (x_out may equal x), out = v · rsqrt(mean(v²) + eps) · (1 + w) (out may equal x
// when x_out is null). Bitwise the adds in that order then launch_rms_norm_zc. n <= kAddRmsNormMaxCols.
void launch_residual_rms_norm_zc(const float* x, const float* y1, const float* y2, float* x_out, const float* w,
                                 int64_t T, int64_t n, float eps, float* out, cudaStream_t stream);
// launch_residual_rms_norm_zc that also writes out's FP8 quantisation, the bits
// launch_quant_fp8_rows128(out, T, n, T_pad, q, scales) writes (codes [T_pad, n], scales [n/128,
// T_pad], padding rows zero with scale 1), without that kernel's pass over out. n a multiple of 128.
void launch_residual_rms_norm_quant(const float* x, const float* y1, const float* y2, float* x_out, const float* w,
                                    int64_t T, int64_t n, float eps, float* out, int64_t T_pad, uint8_t* q,
                                    float* scales, cudaStream_t stream);
// out [R, n] = src[rows[r]]; rows on the device.
void launch_gather_rows(const float* src, const int32_t* rows, int64_t R, int64_t n, float* out, cudaStream_t stream);
// The same rows of up to three tensors in one launch (the GDN stash's qkv, b and a):
// outs[i] [R, ns[i]] = srcs[i][rows[r]].
struct GatherRowsPart {
    const float* src = nullptr;
    int64_t n = 0;
    float* out = nullptr;
};
void launch_gather_rows3(const GatherRowsPart (&parts)[3], const int32_t* rows, int64_t R, cudaStream_t stream);
// Up to three whole copies in one launch (the whole-batch GDN stash: every row's qkv, b and a;
// three memcpy nodes before, ~1 µs each in a CUDA graph): parts[i].out[0, n) = parts[i].src[0, n).
// Parts of n = 0 are skipped; src and out must be 16-byte aligned and n % 4 == 0 (float4 copies).
bool copy3_supported(const GatherRowsPart (&parts)[3]);
void launch_copy3(const GatherRowsPart (&parts)[3], cudaStream_t stream);
// out [T, 2n] = [a | b].
void launch_concat_columns(const float* a, const float* b, int64_t T, int64_t n, float* out, cudaStream_t stream);
// dst (bf16 bits) = round-to-nearest-even(src), n elements.
void launch_f32_to_bf16(const float* src, int64_t n, uint16_t* dst, cudaStream_t stream);
// dst [rows, cols] (bf16 bits) = fp8 e4m3 src [rows, cols] · scale_inv[r/128][c/128] (fp32 scales).
void launch_dequant_fp8_block(const uint8_t* src, const float* scale_inv, int64_t rows, int64_t cols, uint16_t* dst,
                              cudaStream_t stream);
// FP8 activations for the block-scaled GEMM (gemm.cpp), per row and 128-column group g:
//   scale = amax(x[t, 128g .. 128g+127]) / 448 (1 where amax is 0), q = e4m3_satfinite_rne(x / scale)
// (x / scale correctly rounded in fp32), so x ≈ q · scale. x [T, K] fp32, K a multiple of 128;
// q [T_pad, K] e4m3 codes; scales [K/128, T_pad] fp32, t fastest (cuBLASLt's VEC128_32F layout for
// the K-major B operand: outer dimension contiguous, leading dimension T_pad). Rows T..T_pad-1
// are written as zeros with scale 1. T_pad >= T, a multiple of 4. CPU reference: the lab's
// quantise_rows128 (bench/kernels/fp8_gemm_lab.cu).
void launch_quant_fp8_rows128(const float* x, int64_t T, int64_t K, int64_t T_pad, uint8_t* q, float* scales,
                              cudaStream_t stream);
// dst (fp32) = bf16 src, n elements.
void launch_bf16_to_f32(const uint16_t* src, int64_t n, float* dst, cudaStream_t stream);
// out[r] = argmax of x[r, 0..n) (first index on ties; NaN never wins), x [R, n]. Few rows are
// split over several blocks per row, whose candidates go through `workspace`
// (argmax_rows_workspace_bytes(R, n) bytes, 8-byte aligned; none needed when that is 0).
size_t argmax_rows_workspace_bytes(int64_t R, int64_t n);
void launch_argmax_rows(const float* x, int64_t R, int64_t n, int32_t* out, void* workspace, cudaStream_t stream);
// Writes NaN into n floats (tests poison activations to catch unwritten outputs).
void launch_fill_nan(float* x, int64_t n, cudaStream_t stream);

}  // namespace qs::cuda

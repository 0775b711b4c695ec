// The MoE router and shared-expert gate of one layer in one pass over x, on bf16 tensor cores at
// fp32-class accuracy (CudaOptions::moe_router_kernel 1; bench/kernels/NOTES.md "Router on tensor
// cores"): logits [T, E] = x · Wrᵀ and gate [T] = x · wgᵀ, where W = [Wr; wg] ([E + 1, H]) is
// stored as two bf16 arrays W = Wh + Wl (split once at upload, rows padded to a multiple of 16
// with zeros) and each x element is split in registers into three bf16 terms xh + xm + xl = x
// exactly. mma.sync m16n8k16 products Wh·xh + Wh·xm + Wh·xl (+ Wl·xh + Wl·xm where Wl ≠ 0), fp32
// accumulation: with a bf16 router (real checkpoints: Wl = 0) every product is exact and only
// the fp32 accumulation rounds, as in cuBLAS's fp32 GEMM; an fp32 router keeps W to 2⁻¹⁷ (the
// dropped W − Wh − Wl, a fixed perturbation of W) and drops xl·Wl (≤ 2⁻²⁵). Top-k choices then
// match the fp32 CPU specification like cuBLAS's fp32 GEMM does, and the logits move with x as
// smoothly as a fp32 GEMM's (a two-term x split made them a step function of x: NOTES.md
// "Router: the two-way split dithers").
// Included from g++-compiled code: no device-only syntax here.
#pragma once

#include <cstdint>
#include <vector>

#include <cuda_runtime.h>

namespace qs::cuda {

// CudaOps::moe takes the kernel from this many rows on (below, cuBLAS's fp32 GEMMs). H200
// (router_lab, bf16 router, E = 256, H = 2,048, x in three bf16 terms; session 18): T = 16,384
// 202 µs against cuBLAS's 409; T = 4,096 153 against 129; T = 1,024 139 against 52; T = 1..64
// 90-110 against 23-28. Since session 35 (each thread's copy addresses computed once, the full
// row tile's loop unpredicated, K 64 a stage at large T), on an H100: T = 16,384 170-175 against
// cuBLAS's 400-412, T = 4,096 133-135 against 129-130, T = 1..64 25 against 19-22 (16-token
// tiles), and between (session 35's final kernel, bf16 router / fp32 router with lo operands):
// T = 2,048 129 / 116 against 72 / 69, 4,096 135 / 140 against 129 / 127, 6,144 142 / 195 against
// 186 / 188, 8,192 143 / 197 against 219 / 221. So bf16 routers (every published checkpoint's, and
// the dummy weights') take the kernel from 6,144 rows, fp32 ones (three products) from 8,192.
constexpr int64_t kRouterKernelMinRowsF32 = 8192;
constexpr int64_t kRouterKernelMinRowsBf16 = 6144;
inline int64_t router_kernel_min_rows(bool has_lo) { return has_lo ? kRouterKernelMinRowsF32 : kRouterKernelMinRowsBf16; }

// Rows (E + 1) the kernel takes: the real model has E = 256.
constexpr int kRouterMaxRows = 272;  // 17 × 16: 257 rounded up to the tile

// Whether the kernel takes a router of E experts over H inputs: E + 1 <= 272 rows, H a multiple of 8.
bool router_logits_supported(int64_t E, int64_t H);
// Rows of the padded hi/lo arrays: E + 1 rounded up to a multiple of 16.
int64_t router_padded_rows(int64_t E);

// Splits w [rows, H] (fp32, row-major; the router's E rows then the gate's one) into hi/lo bf16
// bits [padded_rows, H] (zero rows after `rows`). Returns whether any lo element is nonzero.
bool router_split_weights(const std::vector<float>& w, int64_t rows, int64_t padded_rows, int64_t H,
                          std::vector<uint16_t>& hi, std::vector<uint16_t>& lo);

// x [T, H] fp32; w_hi / w_lo [padded_rows, H] bf16 bits (w_lo null: Wl = 0, two products);
// logits [T, E] and gate [T] fp32 (row e < E of W → logits column e, row E → gate).
// variant (labs): 0 by shape; 1 the 128-token tiles (K 32 a stage, 3 stages); 2 the 16-token tiles;
// 3 the 64-token tiles; 4 the 128-token tiles with K 64 a stage in 2 stages (variant 1 when w_lo is
// set). All give the same bits.
void launch_router_logits(const float* x, int64_t T, int64_t H, const uint16_t* w_hi, const uint16_t* w_lo,
                          int64_t E, float* logits, float* gate, cudaStream_t stream, int variant = 0);

}  // namespace qs::cuda

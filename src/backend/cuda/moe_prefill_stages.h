// The MoE prefill path's stages around the CUTLASS grouped GEMMs (moe_prefill_stages.cu; the
// sequence is in moe_prefill.cu): the sort by expert, the gather + quantisation of x, SiLU·mul +
// quantisation of h, and the combine, in two versions (MoeParams::prefill_version):
//  1. the one-block sort (moe_route.cu) and one load in flight per warp in the other stages;
//  2. a multi-block sort (per-block histograms, one scan block, a stable scatter: rows of an expert
//     in pair order, so the permutation is a function of the routing alone), and the gather, the
//     SiLU and the combine with every load of a warp (thread) issued before its first store (the
//     SiLU: two rows a warp, staged in shared memory by cp.async).
// Both versions put every (token, expert) row through the same arithmetic, so y is bitwise equal.
// nvcc-only header (bf16 types); the CPU emulation (bench/kernels/moe_emu.cpp) includes the .cu.
#pragma once

#include <cstdint>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

namespace qs::cuda::moe {

constexpr int kPrefillWarps = 8;         // warps per block of the gather and SiLU stages (a token / row per warp)
constexpr int kPrefillSortWarps = 8;     // warps per block of the version 2 sort
constexpr int kPrefillSortChunk = 2048;  // (token, expert) pairs per sort block: 64 blocks at T = 16,384, k = 8
constexpr int kPrefillSortMaxE = 512;    // the grouped GEMMs' limit (moe_grouped_gemm_tiles)
constexpr int kPrefillScanThreads = kPrefillSortMaxE;

struct PrefillSortParams {
    const int* topk_id;  // [T, k], every id in [0, E)
    int T, E, k;
    int chunk;           // pairs per block: a positive multiple of 32 · kPrefillSortWarps
    int* blk;            // [prefill_sort_blocks, E]: the histogram kernel's counts, then (scan) first rows
    int* expert_off;     // [E + 2]: first sorted row of expert e; [E] = T·k (shared expert), [E + 1] = T·(k+1)
    int* row_pos;        // [T·(k+1)]: sorted row of pair i = t·k + j; [T·k + t] = the shared expert's row of t
};
inline int prefill_sort_blocks(int T, int k, int chunk) { return (T * k + chunk - 1) / chunk; }

struct GatherQuantParams {
    const float* x;       // [T, H]
    const int* row_pos;   // [T·(k+1)]
    int T, H, k;
    uint8_t* a8;          // [R, H] fp8 e4m3, or bf16 (FP8 = false)
    float* sfa;           // [R, H/128] (fp8)
};

struct SiluQuantParams {
    const __nv_bfloat16* gu;  // [R, 2·Imax]: gate in [0, I_e), up in [Imax, Imax + I_e)
    int R, routed_rows, I, I_shared, imax;
    uint8_t* h8;              // [R, Imax] fp8 e4m3, or bf16 (FP8 = false)
    float* sfh;               // routed rows: I/128 scales each, then the shared rows: I_shared/128
};

struct CombineSortedParams {
    const __nv_bfloat16* eo;         // [R, H]
    const int* row_pos;              // [T·(k+1)]
    const float* topk_w;             // [T, k]
    const float* shared_gate_logit;  // [T]
    int T, H, k;
    float* y;                        // [T, H]
};

#if !defined(QS_MOE_EMULATE)
// Version 2's sort: three launches (histogram, scan, scatter); p.blk must hold
// prefill_sort_blocks(T, k, chunk) · E ints.
void launch_prefill_sort_v2(const PrefillSortParams& p, cudaStream_t stream);
void launch_prefill_gather(const GatherQuantParams& p, bool fp8, int version, cudaStream_t stream);
void launch_prefill_silu(const SiluQuantParams& p, bool fp8, int version, cudaStream_t stream);
void launch_prefill_combine(const CombineSortedParams& p, int version, cudaStream_t stream);
#endif

}  // namespace qs::cuda::moe

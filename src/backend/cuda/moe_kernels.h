// Sparse MoE block on the GPU (spec §2.5; CPU reference: CpuOps::moe in
// src/backend/cpu/cpu_moe.cpp). CudaOps computes router_logits = x · routerᵀ and
// shared_gate_logit = x · shared_expert_gateᵀ (fp32, cuBLAS) and calls launch_moe for the rest:
//
//   p_t = softmax(router_logits_t) (fp32, over E);  top-k of p_t by value, ties to the lower index;
//   w_tj = p_t[e_tj] / Σ_j p_t[e_tj] if norm_topk_prob else p_t[e_tj];
//   expert_e(x) = down_e( silu(gate_e · x) ⊙ (up_e · x) );
//   y_t = Σ_{j<k} w_tj · expert_{e_tj}(x_t)  (summed in top-k order)  +  σ(shared_gate_logit_t) · shared(x_t).
//
// Pipeline (five launches, no host synchronisation, CUDA-graph capturable; see moe_kernels.cu
// and the moe_*.cu files it names):
// route+top-k (+ x to bf16) → one-block sort of the (token, j) pairs by expert + tile list →
// grouped GEMM gate_up with SiLU·mul → grouped GEMM down into per-(token, j) rows → combine.
// The shared expert is handled as expert number E with all T tokens routed to it.
// Up to kMoeSmallTMax tokens (decode, MTP verify) take the small-T path instead (moe_small.cu):
// route + list of distinct experts → gate_up over (expert, 16-row slice) blocks → down + combine
// over (token, 8-column slice) blocks; three launches, the same rounding points.
// Included from g++-compiled code: no device-only syntax here.
#pragma once

#include <cstddef>
#include <cstdint>

#include <cuda_runtime.h>

#include "backend/cuda/device_batch.h"

namespace qs::cuda {

struct MoeExpertTable {            // device arrays built once at weight upload
    DeviceWeightFormat format;      // kBF16 or kFP8Block (layouts in device_batch.h)
    const void* const* gate;        // [E + 1] device pointers to [I_e, H] weights; entry E = shared expert
    const void* const* up;          // [E + 1] [I_e, H]
    const void* const* down;        // [E + 1] [H, I_e]
    const float* const* gate_scale; // [E + 1] fp8 scale_inv [ceil(I_e/128), ceil(H/128)] (null for bf16)
    const float* const* up_scale;   // [E + 1] same shape as gate_scale
    const float* const* down_scale; // [E + 1] [ceil(H/128), ceil(I_e/128)]
    int E, H, I, I_shared;          // routed experts have I_e = I (moe_intermediate_size), the shared I_shared
    // INT4 W4A16 experts kept packed (backend/int4_layout.h), beside the BF16 copies above (format
    // kBF16): [E + 1] pointers to u32 codes [rows, cols/8] and scales (INT4: bf16 [rows,
    // cols/int4_group]; NVFP4, below: E4M3 bytes [rows, cols/16]).
    // Null when the experts are not INT4; the small-T path (T <= kMoeSmallTMax) then reads these,
    // every other path the BF16 copies.
    const uint32_t* const* gate_q = nullptr;
    const uint32_t* const* up_q = nullptr;
    const uint32_t* const* down_q = nullptr;
    const void* const* gate_qs = nullptr;
    const void* const* up_qs = nullptr;
    const void* const* down_qs = nullptr;
    int int4_group = 0;
    // NVFP4 experts (CudaOptions::nvfp4_kernels; backend/nvfp4_layout.h): the arrays above hold the
    // NVFP4 device layout (E2M1 codes in the INT4 nibble order, E4M3 block scale bytes, int4_group 16) and
    // nvfp4_global the matrices' fp32 global multipliers [3 (E + 1)] (gate, up, down of expert e at
    // 3e, 3e + 1, 3e + 2). The small-T path, the 4-bit grouped GEMMs (int4_grouped) and the
    // scratch's dequantisation (bf16_in_scratch) read them as INT4's; every other path the BF16 values.
    bool nvfp4 = false;
    const float* nvfp4_global = nullptr;
    // INT4 experts without BF16 copies (CudaOptions::moe_int4_scratch, moe_int4_dequant.h): gate,
    // up and down point into the device's one-layer BF16 scratch, which holds this layer's values
    // only once launch_moe has dequantised them there; it does so itself on every path that reads
    // them (the prefill path, the mma.sync path); the INT4 paths read the packed arrays as before.
    bool bf16_in_scratch = false;
    // The scratch's base and bytes (with bf16_in_scratch): MoeParams::int4_prefill_version 2 writes
    // the mixed-input GEMMs' scales there instead of BF16 values (moe_int4_mixed.h). The upload
    // sizes it for the paths the options leave to the layer (DeviceWeights::Int4ScratchPlan): BF16
    // values, or the scales only (then gate, up and down point past its end); the dequantisation
    // and the scales' preparation each check that what they write fits (a clear error otherwise).
    void* int4_scratch = nullptr;
    size_t int4_scratch_bytes = 0;
};

struct MoeParams {
    const float* x;                  // [T, H]
    const float* router_logits;      // [T, E]
    const float* shared_gate_logit;  // [T]
    MoeExpertTable experts;
    int T, top_k;
    bool norm_topk_prob;
    void* workspace;                 // moe_workspace_bytes(T, H, I, I_shared, E, top_k) bytes, 256-aligned
    float* y;                        // [T, H]
    // Added field (tuning/tests only): GEMM tile configuration; -1 = chosen from T·top_k/E.
    // 0: 16 rows × 128 weight rows per tile (decode), 1: 32 × 128 (decode, ~16 rows per expert),
    // 2: 128 × 128 (prefill), 3: 16 × 64 (a few tokens: twice the blocks of 0).
    int tile_config = -1;
    // Added field (tuning/tests only): -1 = chosen from T·top_k/E; 0 = the mma.sync grouped GEMMs;
    // 1 = the prefill path (CUTLASS wgmma/TMA grouped GEMMs; FP8 activations for FP8 experts;
    // moe_prefill.h); 2 = the same with the ping-pong GEMM schedule for fp8 (bf16: as 1). A
    // tile_config >= 0 keeps the mma.sync path.
    int gemm_path = -1;
    // Added field (tuning/tests only): the small-T path (moe_small.cu: route + plan, gate_up,
    // down fused with the combine; three launches, no sort). -1 = chosen: T <= kMoeSmallTMax with
    // tile_config and gemm_path left at -1; 0 = never; 1 = required (T <= kMoeSmallTMax).
    int small_t = -1;
    // Added fields: the small-T path's version (bench/kernels/NOTES.md "Small-T v2"). 1: three
    // launches, router_logits and shared_gate_logit from the caller. 2: the router GEMV and the
    // shared-expert-gate logit are computed inside the path from router_weight (fp32 [E, H]) and
    // shared_gate_weight (fp32 [H]), which must then be set (router_logits and shared_gate_logit
    // are not read and may be null), the top-k runs in the GEMV's last block, and gate_up and
    // down are launched with programmatic dependent launch (the shared expert's gate_up blocks
    // start while the router runs). Only read when the small-T path is taken (moe_computes_router).
    int small_version = 1;
    const float* router_weight = nullptr;
    const float* shared_gate_weight = nullptr;
    // Optional (small_version 2): a device int that is 0 before the call and is left 0 (the
    // router blocks count themselves on it). Null: the call zeroes one in its workspace first
    // (one memset more). One counter serves every call of a stream (calls do not overlap).
    int* small_counter = nullptr;
    // Added field (small-T path, FP8 and BF16 experts): 1 = each gate_up block asks L2 for its share
    // of its expert's down matrix (prefetch.global.L2, nothing waited for), so that the down kernel,
    // which can only start once gate_up's blocks retire, finds its weights in L2 instead of DRAM.
    // Results are unchanged (a prefetch writes nothing). 0 = no prefetch.
    int small_prefetch_down = 0;
    // Added field (small-T path, FP8 and BF16 experts): the down + combine kernel's version. 1: a
    // block per token and 8 output columns (moe_small.cu). 2: a block per 8 columns of every token,
    // each lane streaming its chunks of the experts' down rows slot after slot through a cp.async
    // ring in shared memory (moe_small_down_slots.cu): one wave at any T, each distinct expert's
    // row read once for all its tokens. The same bits either way. Shapes it cannot stage (down rows
    // wider than 1,024 FP8 or 512 BF16 values, or over 200 KB of shared memory) run version 1.
    int small_down_version = 1;
    // Added field (small-T path, INT4 experts): the gate_up kernel's version. 1: fp32 unpack and FMAs
    // (moe_small_int4.cu). 2: on tensor cores (moe_small_int4_gate_up_mma.cu: mma.sync on exact bf16
    // pairs of the codes, the same products, fp32 sums in another order; NVFP4's block scales folded
    // into the codes, exactly), where the shapes fit it (an INT4 group that is a multiple of 128 or
    // NVFP4's 16, H a multiple of 128 up to 4,096).
    int small_int4_gate_up_version = 1;
    // Added field: the decode grouped GEMMs' version (bench/kernels/NOTES.md "Decode v2"), read
    // when the mma.sync grouped path runs with tile_config -1. 1: moe_gemm.cu's tiles as chosen
    // from T·top_k/E. 2: 32-row tiles with the MMA operands swapped (moe_decode_gemm.cu: weights
    // as the 16-row operand, tokens in 8-row groups, empty groups skipped); same route, sort and
    // combine, same rounding points.
    int decode_version = 1;
    // Added field: decode_version 2's (and the INT4 grouped GEMMs') down GEMM launched with
    // programmatic dependent launch (1) so that its blocks take the SMs gate_up's last wave
    // leaves, issuing their first weight copies before waiting for gate_up's h; 0 = an ordinary
    // launch. The same bits either way.
    int decode_pdl = 0;
    // Added field: decode_version 2's (and the INT4 grouped GEMMs') down GEMM writes the expert
    // outputs (eout) rounded to bf16 and the combine reads them so (1), as the prefill path does,
    // instead of fp32 (0): half of the 4·T·(k+1)·H bytes written and read again; the small-T path
    // then rounds each expert's output the same way before its combine (moe_common.cuh expert_out),
    // so one token's MoE output does not depend on how many rows its call carried beyond summation
    // order. Changes y's bits (one more rounding per expert output, within the CPU-reference bounds).
    int decode_eout_bf16 = 0;
    // Added field: the prefill path's stages around the CUTLASS GEMMs (moe_prefill_stages.cu;
    // bench/kernels/NOTES.md "Prefill v2"), read when that path runs. 1: the one-block sort and
    // the first gather / SiLU / combine kernels. 2: the multi-block sort (histogram, scan, stable
    // scatter), and the gather, SiLU·mul and combine with all their loads issued before any
    // store; the same rows in the same order and the same arithmetic, so y is bitwise that of 1.
    int prefill_version = 1;
    // Added fields: INT4 experts (experts.gate_q set) above the small-T path. 0: the BF16 copies
    // (today's paths); 1: the tensor-core INT4 grouped GEMMs (moe_decode_gemm_int4.cu: 4-bit
    // codes and bf16 group scales streamed, unpacked to bf16 in registers; the same route, sort
    // and combine as decode_version 2) for kMoeSmallTMax < T <= int4_grouped_max_t with
    // tile_config and gemm_path left at -1, when moe_int4_grouped_supported(experts); other
    // calls keep the BF16 copies.
    int int4_grouped = 0;
    int int4_grouped_max_t = 1024;
    // Added field: INT4 experts without BF16 copies (experts.bf16_in_scratch) on the prefill path.
    // 1: dequantised into the BF16 scratch, then the BF16 grouped GEMMs (moe_int4_dequant.h).
    // 2: CUTLASS's mixed-input grouped GEMMs on the 4-bit codes (moe_int4_mixed.h), where
    // moe_int4_mixed_supported(experts); the same bf16 weight values summed in the same K order: y
    // bitwise 1's (GPU tests, H100 session 42).
    int int4_prefill_version = 1;
    // Added field (tuning): version 2's GEMM tiles (moe_cutlass_gemm_int4.cu; the same bits with
    // each): 0 = 128 weight rows × 128 tokens, 1 = 128 × 256, 2 = 128 × 256 in clusters of two along
    // the weight rows; -1 (default) = by routed rows per expert: 2 from kInt4MixedWideRowsPerExpert
    // (H100, session 42, `moe_int4_lab --scratch`, one MoE call: at 16,384 tokens 2,870 µs against
    // 3,237 on 0 and 2,899 on 1; at 4,096 1,307 against 1,343; at 2,048 tokens, 64 rows per expert,
    // 1,187 against 0's 1,024), else 0.
    int int4_mixed_tile = -1;
};

// MoeParams::int4_mixed_tile -1: the wide clustered tiles from this many routed rows per expert (T·k/E).
constexpr double kInt4MixedWideRowsPerExpert = 128.0;

// Whether the INT4 grouped GEMMs cover these experts: INT4 arrays set and a scale group that is
// a multiple of 64 dividing H, I and I_shared; or NVFP4 arrays (group 16, the globals) with H, I
// and I_shared multiples of 64.
bool moe_int4_grouped_supported(const MoeExpertTable& x);

// Largest T the small-T path takes (MoeParams::small_t).
constexpr int kMoeSmallTMax = 8;

// Whether launch_moe computes the router logits and the shared-expert-gate logit itself (the
// small-T path, version 2): then the caller skips its router linears.
bool moe_computes_router(const MoeParams& p);

// Whether launch_moe takes the small-T path (moe_small.cu) for these parameters.
bool moe_takes_small_path(const MoeParams& p);
// Whether that call's down + combine runs version 2 (MoeParams::small_down_version; the shapes fit it).
bool moe_takes_small_down_slots(const MoeParams& p);
// Whether that call's INT4 gate_up runs on tensor cores (MoeParams::small_int4_gate_up_version 2).
bool moe_takes_small_int4_gate_up_mma(const MoeParams& p);
// Whether launch_moe runs this call's INT4 experts on the mixed-input prefill GEMMs
// (MoeParams::int4_prefill_version 2; moe_int4_mixed.h).
bool moe_takes_int4_mixed(const MoeParams& p);

// Whether the grouped GEMM's tiles cover these shapes: hidden a multiple of 128, intermediates
// of 64, at most 512 experts and top-k 32. Other shapes take the fp32 kernels
// (moe_reference_kernels.h) with F32 expert tables.
inline bool moe_grouped_gemm_tiles(int64_t E, int64_t H, int64_t I, int64_t I_shared, int64_t top_k) {
    return H >= 128 && H % 128 == 0 && I % 64 == 0 && I_shared % 64 == 0 && E <= 512 && top_k <= 32;
}

// Scratch bytes launch_moe needs for these sizes (independent of the routing).
size_t moe_workspace_bytes(int64_t T, int64_t H, int64_t I, int64_t I_shared, int64_t E, int64_t top_k);

// Enqueues the whole MoE block on `stream`. No synchronisation, no allocation.
void launch_moe(const MoeParams& p, cudaStream_t stream);

// Same as launch_moe, recording events[0..5] before the first and after each of the five stages
// (route, sort, gate_up, down, combine) for the lab's per-stage timings. Not for graph capture.
void launch_moe_profiled(const MoeParams& p, cudaStream_t stream, cudaEvent_t events[6]);

}  // namespace qs::cuda

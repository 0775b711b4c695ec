// The MoE prefill path's stages around the CUTLASS grouped GEMMs, versions 1 and 2
// (moe_prefill_stages.h says what differs; moe_prefill.cu sequences them; bench/kernels/NOTES.md
// "Prefill v2" has the budget). No CUTLASS here, so the CPU emulation (bench/kernels/moe_emu.cpp
// --prefill2) runs this file's kernels unchanged.
#include "backend/cuda/moe_prefill_stages.h"

#include <cuda_bf16.h>
#include <cuda_fp8.h>

#if !defined(QS_MOE_EMULATE)
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/ptx_helpers.cuh"  // the emulation shim defines qs::cuda::ptx itself
#include "core/check.h"
#endif
#include "backend/cuda/moe_common.cuh"

namespace qs::cuda::moe {
namespace {

// ---------------------------------------------------------------------------------------------
// Shared arithmetic (both versions: the same operations in the same order)
// ---------------------------------------------------------------------------------------------

struct QuantCodes {
    uint32_t codes;  // four e4m3 codes, column order
    float scale;
};

// Quantises the warp's 128 consecutive values (4 per lane, lane order) with one scale
// (DeepSeek recipe: scale = amax/448, code = sat(x/scale)).
__device__ __forceinline__ QuantCodes quant128(float4 v) {
    float amax = fmaxf(fmaxf(fabsf(v.x), fabsf(v.y)), fmaxf(fabsf(v.z), fabsf(v.w)));
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
    const float scale = amax > 0.0f ? __fdiv_rn(amax, 448.0f) : 1.0f;
    const __nv_fp8x2_storage_t lo = __nv_cvt_float2_to_fp8x2(
        make_float2(__fdiv_rn(v.x, scale), __fdiv_rn(v.y, scale)), __NV_SATFINITE, __NV_E4M3);
    const __nv_fp8x2_storage_t hi = __nv_cvt_float2_to_fp8x2(
        make_float2(__fdiv_rn(v.z, scale), __fdiv_rn(v.w, scale)), __NV_SATFINITE, __NV_E4M3);
    return {uint32_t(lo) | (uint32_t(hi) << 16), scale};
}

__device__ __forceinline__ float4 bf16x4_to_float4(uint2 u) {
    const __nv_bfloat162 a = *reinterpret_cast<const __nv_bfloat162*>(&u.x);
    const __nv_bfloat162 b = *reinterpret_cast<const __nv_bfloat162*>(&u.y);
    const float2 fa = __bfloat1622float2(a), fb = __bfloat1622float2(b);
    return make_float4(fa.x, fa.y, fb.x, fb.y);
}

__device__ __forceinline__ float silu(float g) { return g / (1.0f + expf(-g)); }

__device__ __forceinline__ float4 silu_mul(float4 gv, float4 uv) {
    return make_float4(silu(gv.x) * uv.x, silu(gv.y) * uv.y, silu(gv.z) * uv.z, silu(gv.w) * uv.w);
}

__device__ __forceinline__ void fma4(float4& acc, float w, float4 v) {
    acc.x += w * v.x;
    acc.y += w * v.y;
    acc.z += w * v.z;
    acc.w += w * v.w;
}

// Lane j < k: the sorted row of pair (t, j); lane k: the shared expert's row of t (k <= 31).
__device__ __forceinline__ int token_row_of_lane(const int* row_pos, int T, int k, int t, int lane) {
    return lane < k ? row_pos[size_t(t) * k + lane] : lane == k ? row_pos[size_t(T) * k + t] : 0;
}

// ---------------------------------------------------------------------------------------------
// Version 1 (moved unchanged from moe_prefill.cu)
// ---------------------------------------------------------------------------------------------

// One warp per token reads x_t once and stores its codes at the token's k + 1 sorted rows.
// FP8: e4m3 codes + one scale per 128 columns; else bf16 (round to nearest even).
template <bool FP8>
__global__ __launch_bounds__(kPrefillWarps * 32) void moe_gather_quant_kernel(GatherQuantParams p) {
    const int lane = threadIdx.x & 31;
    const int t = blockIdx.x * kPrefillWarps + (threadIdx.x >> 5);
    if (t >= p.T) return;
    const int n = p.k + 1;
    const int my_row = token_row_of_lane(p.row_pos, p.T, p.k, t, lane);
    const float4* xs = reinterpret_cast<const float4*>(p.x + size_t(t) * p.H);
    const int kb_n = p.H / 128;
    for (int kb = 0; kb < kb_n; ++kb) {
        const float4 v = xs[kb * 32 + lane];
        if constexpr (FP8) {
            const QuantCodes q = quant128(v);
            for (int j = 0; j < n; ++j) {
                const size_t r = size_t(__shfl_sync(0xffffffffu, my_row, j));
                reinterpret_cast<uint32_t*>(p.a8 + r * p.H)[kb * 32 + lane] = q.codes;
                if (lane == 0) p.sfa[r * kb_n + kb] = q.scale;
            }
        } else {
            const uint2 b = make_uint2(pack_bf16x2(v.x, v.y), pack_bf16x2(v.z, v.w));
            for (int j = 0; j < n; ++j)
                reinterpret_cast<uint2*>(p.a8 + size_t(__shfl_sync(0xffffffffu, my_row, j)) * p.H * 2)[kb * 32 + lane] = b;
        }
    }
}

template <bool FP8>
__global__ __launch_bounds__(kPrefillWarps * 32) void moe_silu_quant_kernel(SiluQuantParams p) {
    const int lane = threadIdx.x & 31;
    const int r = blockIdx.x * kPrefillWarps + (threadIdx.x >> 5);
    if (r >= p.R) return;
    const bool shared = r >= p.routed_rows;
    const int ie = shared ? p.I_shared : p.I;
    const int kb_n = ie / 128;
    float* sf = shared ? p.sfh + size_t(p.routed_rows) * (p.I / 128) + size_t(r - p.routed_rows) * kb_n
                       : p.sfh + size_t(r) * kb_n;
    const uint2* g = reinterpret_cast<const uint2*>(p.gu + size_t(r) * 2 * p.imax);
    const uint2* u = reinterpret_cast<const uint2*>(p.gu + size_t(r) * 2 * p.imax + p.imax);
    for (int kb = 0; kb < kb_n; ++kb) {
        const float4 hv = silu_mul(bf16x4_to_float4(g[kb * 32 + lane]), bf16x4_to_float4(u[kb * 32 + lane]));
        if constexpr (FP8) {
            const QuantCodes q = quant128(hv);
            reinterpret_cast<uint32_t*>(p.h8 + size_t(r) * p.imax)[kb * 32 + lane] = q.codes;
            if (lane == 0) sf[kb] = q.scale;
        } else {
            reinterpret_cast<uint2*>(p.h8 + size_t(r) * p.imax * 2)[kb * 32 + lane] =
                make_uint2(pack_bf16x2(hv.x, hv.y), pack_bf16x2(hv.z, hv.w));
        }
    }
}

// y_t = Σ_j w_tj · eo[row_pos[t·k+j]] (in j order) + σ(sg_t) · eo[row_pos[T·k+t]].
__global__ __launch_bounds__(kCombineThreads) void moe_combine_sorted_kernel(CombineSortedParams p) {
    const int t = blockIdx.x;
    const float sg = 1.0f / (1.0f + expf(-p.shared_gate_logit[t]));
    const int h4 = p.H / 4;
    for (int c = threadIdx.x; c < h4; c += kCombineThreads) {
        float4 acc = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        for (int j = 0; j <= p.k; ++j) {
            const float w = j < p.k ? p.topk_w[size_t(t) * p.k + j] : sg;
            const int r = j < p.k ? p.row_pos[size_t(t) * p.k + j] : p.row_pos[size_t(p.T) * p.k + t];
            fma4(acc, w, bf16x4_to_float4(reinterpret_cast<const uint2*>(p.eo + size_t(r) * p.H)[c]));
        }
        reinterpret_cast<float4*>(p.y + size_t(t) * p.H)[c] = acc;
    }
}

// ---------------------------------------------------------------------------------------------
// Version 2: the sort (histogram → scan → stable scatter)
// ---------------------------------------------------------------------------------------------
// Block b takes pairs [b·chunk, (b+1)·chunk); warp w of it the contiguous sub-chunk w of
// chunk / kPrefillSortWarps pairs, in steps of 32 (lane order). Rows of expert e then follow
// (block, warp, step, lane) = pair order: the scatter is stable.

constexpr int kSortBlockThreads = kPrefillSortWarps * 32;

__device__ __forceinline__ unsigned lanemask_lt() { return (1u << (threadIdx.x & 31)) - 1u; }

struct SubChunk {
    int begin, end;
};
__device__ __forceinline__ SubChunk sub_chunk(const PrefillSortParams& p) {
    const int n_pairs = p.T * p.k, sub = p.chunk / kPrefillSortWarps;
    const int b = blockIdx.x * p.chunk + (threadIdx.x >> 5) * sub;
    const int begin = b < n_pairs ? b : n_pairs;
    return {begin, begin + sub < n_pairs ? begin + sub : n_pairs};
}

// Adds the sub-chunk's pairs per expert to cnt[e] (the warp's own row of the block's counts):
// one add per distinct expert of each 32-pair step, by the lowest lane holding it.
__device__ void warp_expert_counts(const PrefillSortParams& p, SubChunk s, int* cnt) {
    const int lane = threadIdx.x & 31;
    for (int base = s.begin; base < s.end; base += 32) {
        const int i = base + lane;
        const int id = i < s.end ? p.topk_id[i] : -1;
        const unsigned m = __match_any_sync(0xffffffffu, id);
        if (id >= 0 && (m & lanemask_lt()) == 0) cnt[id] += __popc(m);
        __syncwarp();
    }
}

__global__ __launch_bounds__(kSortBlockThreads) void moe_prefill_hist_kernel(PrefillSortParams p) {
    __shared__ int s_cnt[kPrefillSortWarps][kPrefillSortMaxE];
    for (int i = threadIdx.x; i < kPrefillSortWarps * p.E; i += kSortBlockThreads) s_cnt[i / p.E][i % p.E] = 0;
    __syncthreads();
    warp_expert_counts(p, sub_chunk(p), s_cnt[threadIdx.x >> 5]);
    __syncthreads();
    for (int e = threadIdx.x; e < p.E; e += kSortBlockThreads) {
        int c = 0;
        for (int w = 0; w < kPrefillSortWarps; ++w) c += s_cnt[w][e];
        p.blk[size_t(blockIdx.x) * p.E + e] = c;
    }
}

// One block, thread e = expert e: its total over the blocks, the exclusive scan over experts
// (expert_off), then blk[b][e] := expert_off[e] + the counts of e in blocks before b.
__global__ __launch_bounds__(kPrefillScanThreads) void moe_prefill_scan_kernel(PrefillSortParams p) {
    __shared__ int s_warp[kPrefillScanThreads / 32];
    const int e = threadIdx.x, lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int nblk = (p.T * p.k + p.chunk - 1) / p.chunk;  // prefill_sort_blocks (host-only)
    int total = 0;
    if (e < p.E)
        for (int b = 0; b < nblk; ++b) total += p.blk[size_t(b) * p.E + e];
    int inc = total;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
        const int n = __shfl_up_sync(0xffffffffu, inc, o);
        if (lane >= o) inc += n;
    }
    if (lane == 31) s_warp[warp] = inc;
    __syncthreads();
    int before = 0;
    for (int w = 0; w < warp; ++w) before += s_warp[w];
    const int off = before + inc - total;
    if (e < p.E) {
        p.expert_off[e] = off;
        int run = off;
        for (int b = 0; b < nblk; ++b) {
            int* c = p.blk + size_t(b) * p.E + e;
            const int n = *c;
            *c = run;
            run += n;
        }
    }
    if (e == 0) {
        p.expert_off[p.E] = p.T * p.k;
        p.expert_off[p.E + 1] = p.T * (p.k + 1);
    }
}

__global__ __launch_bounds__(kSortBlockThreads) void moe_prefill_scatter_kernel(PrefillSortParams p) {
    __shared__ int s_cur[kPrefillSortWarps][kPrefillSortMaxE];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    for (int i = threadIdx.x; i < kPrefillSortWarps * p.E; i += kSortBlockThreads) s_cur[i / p.E][i % p.E] = 0;
    __syncthreads();
    const SubChunk s = sub_chunk(p);
    warp_expert_counts(p, s, s_cur[warp]);
    __syncthreads();
    // Counts → each warp's first row per expert (warps in order after the block's first row).
    for (int e = threadIdx.x; e < p.E; e += kSortBlockThreads) {
        int run = p.blk[size_t(blockIdx.x) * p.E + e];
        for (int w = 0; w < kPrefillSortWarps; ++w) {
            const int n = s_cur[w][e];
            s_cur[w][e] = run;
            run += n;
        }
    }
    __syncthreads();
    for (int base = s.begin; base < s.end; base += 32) {
        const int i = base + lane;
        const int id = i < s.end ? p.topk_id[i] : -1;
        const unsigned m = __match_any_sync(0xffffffffu, id);
        if (id >= 0) p.row_pos[i] = s_cur[warp][id] + __popc(m & lanemask_lt());
        __syncwarp();
        if (id >= 0 && (m & lanemask_lt()) == 0) s_cur[warp][id] += __popc(m);
        __syncwarp();
    }
    // The shared expert's rows: token order after the routed ones.
    const int routed = p.T * p.k;
    for (int t = blockIdx.x * kSortBlockThreads + threadIdx.x; t < p.T; t += gridDim.x * kSortBlockThreads)
        p.row_pos[routed + t] = routed + t;
}

// ---------------------------------------------------------------------------------------------
// Version 2: gather, SiLU·mul, combine with the loads batched
// ---------------------------------------------------------------------------------------------
// Version 1 keeps one 16-byte (gather) or two 8-byte (SiLU) loads in flight per warp and stores
// between them; these issue a warp's loads first, then quantise, then store (the gather: a row's
// up to kGatherBatch 128-column blocks at a time, H = 2,048 in one batch, and the row's scales as
// one store; the SiLU: kSiluRows rows of kSiluBlocks blocks a warp, into shared memory).

constexpr int kGatherBatch = 16;
constexpr int kCombineBatch = 9;  // k + 1 rows of the real model in one batch

template <bool FP8>
__global__ __launch_bounds__(kPrefillWarps * 32) void moe_gather_quant_v2_kernel(GatherQuantParams p) {
    const int lane = threadIdx.x & 31;
    const int t = blockIdx.x * kPrefillWarps + (threadIdx.x >> 5);
    if (t >= p.T) return;
    const int n = p.k + 1;
    const int my_row = token_row_of_lane(p.row_pos, p.T, p.k, t, lane);
    const float4* xs = reinterpret_cast<const float4*>(p.x + size_t(t) * p.H);
    const int kb_n = p.H / 128;
    for (int kb0 = 0; kb0 < kb_n; kb0 += kGatherBatch) {
        const int nb = kb_n - kb0 < kGatherBatch ? kb_n - kb0 : kGatherBatch;
        float4 v[kGatherBatch];
#pragma unroll
        for (int b = 0; b < kGatherBatch; ++b)
            if (b < nb) v[b] = xs[(kb0 + b) * 32 + lane];
        if constexpr (FP8) {
            uint32_t codes[kGatherBatch];
            float my_scale = 0.0f;  // lane b: the scale of block kb0 + b
#pragma unroll
            for (int b = 0; b < kGatherBatch; ++b) {
                if (b < nb) {
                    const QuantCodes q = quant128(v[b]);
                    codes[b] = q.codes;
                    if (lane == b) my_scale = q.scale;
                }
            }
            for (int j = 0; j < n; ++j) {
                const size_t r = size_t(__shfl_sync(0xffffffffu, my_row, j));
                uint32_t* dst = reinterpret_cast<uint32_t*>(p.a8 + r * p.H) + kb0 * 32 + lane;
#pragma unroll
                for (int b = 0; b < kGatherBatch; ++b)
                    if (b < nb) dst[b * 32] = codes[b];
                if (lane < nb) p.sfa[r * kb_n + kb0 + lane] = my_scale;
            }
        } else {
            uint2 packed[kGatherBatch];
#pragma unroll
            for (int b = 0; b < kGatherBatch; ++b)
                if (b < nb) packed[b] = make_uint2(pack_bf16x2(v[b].x, v[b].y), pack_bf16x2(v[b].z, v[b].w));
            for (int j = 0; j < n; ++j) {
                uint2* dst = reinterpret_cast<uint2*>(p.a8 + size_t(__shfl_sync(0xffffffffu, my_row, j)) * p.H * 2) +
                             kb0 * 32 + lane;
#pragma unroll
                for (int b = 0; b < kGatherBatch; ++b)
                    if (b < nb) dst[b * 32] = packed[b];
            }
        }
    }
}

// SiLU·mul. The bitwise contract fixes ~33 SASS instructions an element (expf; two IEEE
// divisions, each with its slow-path check, call and convergence region; 3 MUFU) in two
// dependent chains of ~80 and ~35 cycles that the convergence regions keep ptxas from
// interleaving: a warp issues about one instruction in three cycles, an SMSP needs 3-4 warps
// computing to issue every cycle, and at ~41 instructions an element all told (version 1: ~51)
// the stage is issue-bound before it is memory-bound. So:
//  - warps, not registers, hide the load latency: loads held in registers cost exactly those warps
//    (a slow-path call puts its registers above everything live across it: 53-74 registers with
//    one or two rows of 16-byte loads in registers). The loads go to shared memory by cp.async
//    instead, one commit group per row of the warp's kSiluRows (all issued first; row 0's maths
//    starts once row 0 has landed, row 1's still in flight), and 40 registers give 48 warps an SM.
//  - a 128-column block is a quarter-warp, 16 values a lane: one amax/448 division and a 3-step
//    butterfly per 16 values (version 1: per 4, and 5 steps), two 16-byte copies of g and of u a
//    lane, 8 codes per store.
// Each lane reads back only the bytes it copied itself: no warp barrier.
constexpr int kSiluRows = 2;    // rows per warp (commit groups; cp_async_wait_upto)
constexpr int kSiluBlocks = 4;  // 128-column blocks per row and batch (a quarter-warp each): I = 512 in one
constexpr int kSiluWarpSmemBytes = kSiluRows * 2 * 2 * 32 * 16;     // [row][chunk][g, u][lane] 16 B
constexpr int kSiluSmemBytes = kPrefillWarps * kSiluWarpSmemBytes;  // 32 KB a CTA
constexpr int kSiluCtasPerSm = 6;  // 40 registers (65,536 / (6 · 256), to a multiple of 8), 6 · 32 KB shared
constexpr int kSiluRowsPerCta = kPrefillWarps * kSiluRows;

// Blocks (x: rows, y: batches of kSiluBlocks 128-column blocks) of the version 2 SiLU's grid.
inline dim3 silu_v2_grid(const SiluQuantParams& p) {
    const int kb_n = (p.I > p.I_shared ? p.I : p.I_shared) / 128;
    return dim3((p.R + kSiluRowsPerCta - 1) / kSiluRowsPerCta, (kb_n + kSiluBlocks - 1) / kSiluBlocks);
}

// cp.async.wait_group takes a constant; n is one once the row loop is unrolled.
__device__ __forceinline__ void cp_async_wait_upto(int n) {
    static_assert(kSiluRows <= 4, "cp_async_wait_upto: n in [0, 3]");
    switch (n) {
        case 0: ptx::cp_async_wait<0>(); break;
        case 1: ptx::cp_async_wait<1>(); break;
        case 2: ptx::cp_async_wait<2>(); break;
        default: ptx::cp_async_wait<3>(); break;
    }
}

// Value hi (0: the low half) of a bf16 pair, exactly (as __bfloat1622float2) in one instruction:
// a bf16 is the high half of its fp32.
__device__ __forceinline__ float bf16_of_pair(uint32_t w, int hi) {
    return __uint_as_float(hi ? w & 0xffff0000u : w << 16);
}

// quant128's codes of 8 consecutive values.
__device__ __forceinline__ uint2 e4m3x8(const float* v, float scale) {
    uint32_t c[4];
#pragma unroll
    for (int i = 0; i < 4; ++i)
        c[i] = __nv_cvt_float2_to_fp8x2(make_float2(__fdiv_rn(v[2 * i], scale), __fdiv_rn(v[2 * i + 1], scale)),
                                        __NV_SATFINITE, __NV_E4M3);
    return make_uint2(c[0] | (c[1] << 16), c[2] | (c[3] << 16));
}

// Warp w of block (b, y): rows r0 = (b·kPrefillWarps + w)·kSiluRows onwards, blocks from
// kb0 = y·kSiluBlocks (a grid row per batch: no loop, so no address is carried across one).
// Quarter-warp q: block kb0 + q; its lane l: columns 8l..8l+7 and 64 + 8l..64 + 8l+7 of it
// (chunks 0 and 1: each warp-wide copy reads four whole 128-byte lines). Row i runs iff its block
// kb0 exists (warp-uniform, so the butterflies stay converged); quarters past the row's blocks
// compute on zeros and store nothing. Unsigned index arithmetic: every index is non-negative, and
// signed division and widening cost instructions here.
template <bool FP8>
__global__ __launch_bounds__(kPrefillWarps * 32, kSiluCtasPerSm) void moe_silu_quant_v2_kernel(SiluQuantParams p) {
    const unsigned lane = threadIdx.x & 31, ql = lane & 7;
    const unsigned r0 = (blockIdx.x * kPrefillWarps + (threadIdx.x >> 5)) * kSiluRows;
    const unsigned kb0 = blockIdx.y * kSiluBlocks, kb = kb0 + (lane >> 3);  // the lane's block
    const unsigned R = p.R, routed = p.routed_rows, imax = p.imax, kb_i = unsigned(p.I) / 128;
    unsigned kb_n[kSiluRows];  // 0 past R
    unsigned kb_max = 0;
#pragma unroll
    for (int i = 0; i < kSiluRows; ++i) {
        const unsigned r = r0 + i;
        kb_n[i] = r < R ? (r >= routed ? unsigned(p.I_shared) / 128 : kb_i) : 0;
        kb_max = kb_n[i] > kb_max ? kb_n[i] : kb_max;
    }
    if (kb0 >= kb_max) return;
    // The lane's slot of (row i, chunk c, gate / up): its own 16 bytes of the warp's stage.
    uint8_t* stage = ptx::dynamic_smem() + (threadIdx.x >> 5) * kSiluWarpSmemBytes + lane * 16;
    auto slot = [&](int i, int c, int up) { return stage + ((i * 2 + c) * 2 + up) * 512; };
    // Copies of blocks that do not exist (past the row's I, rows past R) read nothing and fill
    // zeros; their source is still an address in the buffer (row r0's first block).
#pragma unroll
    for (int i = 0; i < kSiluRows; ++i) {
        const bool ok = kb < kb_n[i];
        const uint4* g = reinterpret_cast<const uint4*>(p.gu + size_t(ok ? r0 + i : r0) * (2 * imax)) +
                         (ok ? kb * 16 : 0) + ql;
#pragma unroll
        for (int c = 0; c < 2; ++c) {
            ptx::cp_async16(ptx::smem_u32(slot(i, c, 0)), g + 8 * c, ok ? 16 : 0);
            ptx::cp_async16(ptx::smem_u32(slot(i, c, 1)), g + 8 * c + imax / 8, ok ? 16 : 0);
        }
        ptx::cp_async_commit();  // a group per row: the waits below count rows
    }
#pragma unroll
    for (int i = 0; i < kSiluRows; ++i) {
        cp_async_wait_upto(kSiluRows - 1 - i);
        if (kb0 >= kb_n[i]) continue;
        const unsigned r = r0 + i;
        uint32_t gw[8], uw[8];  // bf16 pairs: unpacked next to their use, which halves what is live
#pragma unroll
        for (int c = 0; c < 2; ++c) {
            const uint4 gc = *reinterpret_cast<const uint4*>(slot(i, c, 0));
            const uint4 uc = *reinterpret_cast<const uint4*>(slot(i, c, 1));
            gw[4 * c] = gc.x, gw[4 * c + 1] = gc.y, gw[4 * c + 2] = gc.z, gw[4 * c + 3] = gc.w;
            uw[4 * c] = uc.x, uw[4 * c + 1] = uc.y, uw[4 * c + 2] = uc.z, uw[4 * c + 3] = uc.w;
        }
        float h[16];
#pragma unroll
        for (int e = 0; e < 16; ++e) h[e] = silu(bf16_of_pair(gw[e / 2], e % 2)) * bf16_of_pair(uw[e / 2], e % 2);
        const bool store = kb < kb_n[i];
        if constexpr (FP8) {
            // quant128 over a quarter-warp, 16 values a lane: the same amax (the max of the same
            // set, in another order), scale and codes.
            float m[8];
#pragma unroll
            for (int e = 0; e < 8; ++e) m[e] = fmaxf(fabsf(h[2 * e]), fabsf(h[2 * e + 1]));
#pragma unroll
            for (int w = 4; w > 0; w >>= 1)
#pragma unroll
                for (int e = 0; e < w; ++e) m[e] = fmaxf(m[e], m[e + w]);
            float amax = m[0];
#pragma unroll
            for (int o = 4; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
            const float scale = amax > 0.0f ? __fdiv_rn(amax, 448.0f) : 1.0f;
            const uint2 c0 = e4m3x8(h, scale), c1 = e4m3x8(h + 8, scale);
            if (store) {
                uint2* dst = reinterpret_cast<uint2*>(p.h8 + size_t(r) * imax) + kb * 16 + ql;
                dst[0] = c0;
                dst[8] = c1;
                // Routed rows: r·(I/128); the shared rows' scales follow them.
                const size_t sf_row = r < routed ? size_t(r) * kb_i : size_t(routed) * kb_i + size_t(r - routed) * kb_n[i];
                if (ql == 0) p.sfh[sf_row + kb] = scale;
            }
        } else if (store) {
            uint4* dst = reinterpret_cast<uint4*>(p.h8 + size_t(r) * imax * 2) + kb * 16 + ql;
#pragma unroll
            for (int c = 0; c < 2; ++c) {
                const float* v = h + 8 * c;
                dst[8 * c] = make_uint4(pack_bf16x2(v[0], v[1]), pack_bf16x2(v[2], v[3]), pack_bf16x2(v[4], v[5]),
                                        pack_bf16x2(v[6], v[7]));
            }
        }
    }
}

// As moe_combine_sorted_kernel (the same fma chain per element, j order, the shared expert last),
// 8 columns per thread (one 16-byte load per row), the token's rows and weights staged in shared
// memory, and up to kCombineBatch rows' loads in flight before the first fma.
__global__ __launch_bounds__(kCombineThreads) void moe_combine_sorted_v2_kernel(CombineSortedParams p) {
    __shared__ int s_row[32];
    __shared__ float s_w[32];
    const int t = blockIdx.x;
    if (threadIdx.x <= p.k) {
        const int j = threadIdx.x;
        s_row[j] = j < p.k ? p.row_pos[size_t(t) * p.k + j] : p.row_pos[size_t(p.T) * p.k + t];
        s_w[j] = j < p.k ? p.topk_w[size_t(t) * p.k + j] : 1.0f / (1.0f + expf(-p.shared_gate_logit[t]));
    }
    __syncthreads();
    const int h8 = p.H / 8;
    for (int c = threadIdx.x; c < h8; c += kCombineThreads) {
        float4 lo = make_float4(0.0f, 0.0f, 0.0f, 0.0f), hi = lo;
        for (int j0 = 0; j0 <= p.k; j0 += kCombineBatch) {
            uint4 v[kCombineBatch];
#pragma unroll
            for (int b = 0; b < kCombineBatch; ++b)
                if (j0 + b <= p.k) v[b] = reinterpret_cast<const uint4*>(p.eo + size_t(s_row[j0 + b]) * p.H)[c];
#pragma unroll
            for (int b = 0; b < kCombineBatch; ++b) {
                if (j0 + b > p.k) continue;
                const float w = s_w[j0 + b];
                fma4(lo, w, bf16x4_to_float4(make_uint2(v[b].x, v[b].y)));
                fma4(hi, w, bf16x4_to_float4(make_uint2(v[b].z, v[b].w)));
            }
        }
        float4* y = reinterpret_cast<float4*>(p.y + size_t(t) * p.H) + 2 * c;
        y[0] = lo;
        y[1] = hi;
    }
}

}  // namespace

#if !defined(QS_MOE_EMULATE)
void launch_prefill_sort_v2(const PrefillSortParams& p, cudaStream_t stream) {
    QS_CHECK_MSG(p.E <= kPrefillSortMaxE && p.chunk > 0 && p.chunk % kSortBlockThreads == 0 && p.T > 0,
                 "launch_prefill_sort_v2: E <= 512, chunk a multiple of 256");
    const dim3 grid(prefill_sort_blocks(p.T, p.k, p.chunk));
    moe_prefill_hist_kernel<<<grid, kSortBlockThreads, 0, stream>>>(p);
    QS_CUDA_CHECK_LAUNCH();
    moe_prefill_scan_kernel<<<1, kPrefillScanThreads, 0, stream>>>(p);
    QS_CUDA_CHECK_LAUNCH();
    moe_prefill_scatter_kernel<<<grid, kSortBlockThreads, 0, stream>>>(p);
    QS_CUDA_CHECK_LAUNCH();
}

void launch_prefill_gather(const GatherQuantParams& p, bool fp8, int version, cudaStream_t stream) {
    const dim3 grid((p.T + kPrefillWarps - 1) / kPrefillWarps), block(kPrefillWarps * 32);
    if (version == 2) {
        if (fp8) moe_gather_quant_v2_kernel<true><<<grid, block, 0, stream>>>(p);
        else moe_gather_quant_v2_kernel<false><<<grid, block, 0, stream>>>(p);
    } else {
        if (fp8) moe_gather_quant_kernel<true><<<grid, block, 0, stream>>>(p);
        else moe_gather_quant_kernel<false><<<grid, block, 0, stream>>>(p);
    }
    QS_CUDA_CHECK_LAUNCH();
}

void launch_prefill_silu(const SiluQuantParams& p, bool fp8, int version, cudaStream_t stream) {
    const dim3 grid((p.R + kPrefillWarps - 1) / kPrefillWarps), block(kPrefillWarps * 32);
    if (version == 2) {
        const dim3 grid2 = silu_v2_grid(p);
        if (fp8) moe_silu_quant_v2_kernel<true><<<grid2, block, kSiluSmemBytes, stream>>>(p);
        else moe_silu_quant_v2_kernel<false><<<grid2, block, kSiluSmemBytes, stream>>>(p);
    } else {
        if (fp8) moe_silu_quant_kernel<true><<<grid, block, 0, stream>>>(p);
        else moe_silu_quant_kernel<false><<<grid, block, 0, stream>>>(p);
    }
    QS_CUDA_CHECK_LAUNCH();
}

void launch_prefill_combine(const CombineSortedParams& p, int version, cudaStream_t stream) {
    if (version == 2) moe_combine_sorted_v2_kernel<<<p.T, kCombineThreads, 0, stream>>>(p);
    else moe_combine_sorted_kernel<<<p.T, kCombineThreads, 0, stream>>>(p);
    QS_CUDA_CHECK_LAUNCH();
}
#endif

}  // namespace qs::cuda::moe

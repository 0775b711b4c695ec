// The MoE prefill path's stages around the CUTLASS grouped GEMMs, versions 1 and 2
// (moe_prefill_stages.h says what differs; moe_prefill.cu sequences them; bench/kernels/NOTES.md
// "Prefill v2" has the budget). No CUTLASS here, so the CPU emulation (bench/kernels/moe_emu.cpp
// --prefill2) runs this file's kernels unchanged.
#include "backend/cuda/moe_prefill_stages.h"

#include <cuda_bf16.h>
#include <cuda_fp8.h>

#if !defined(QS_MOE_EMULATE)
#include "backend/cuda/cuda_check.h"
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
// between them; these issue a whole row's loads (up to kBatch 128-column blocks: H = 2,048 and
// I = 512 in one batch), then quantise, then store, and write the row's scales as one store.

constexpr int kGatherBatch = 16;
constexpr int kSiluBatch = 8;
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

template <bool FP8>
__global__ __launch_bounds__(kPrefillWarps * 32) void moe_silu_quant_v2_kernel(SiluQuantParams p) {
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
    for (int kb0 = 0; kb0 < kb_n; kb0 += kSiluBatch) {
        const int nb = kb_n - kb0 < kSiluBatch ? kb_n - kb0 : kSiluBatch;
        uint2 gr[kSiluBatch], ur[kSiluBatch];
#pragma unroll
        for (int b = 0; b < kSiluBatch; ++b) {
            if (b < nb) {
                gr[b] = g[(kb0 + b) * 32 + lane];
                ur[b] = u[(kb0 + b) * 32 + lane];
            }
        }
        float my_scale = 0.0f;
#pragma unroll
        for (int b = 0; b < kSiluBatch; ++b) {
            if (b >= nb) continue;
            const float4 hv = silu_mul(bf16x4_to_float4(gr[b]), bf16x4_to_float4(ur[b]));
            if constexpr (FP8) {
                const QuantCodes q = quant128(hv);
                reinterpret_cast<uint32_t*>(p.h8 + size_t(r) * p.imax)[(kb0 + b) * 32 + lane] = q.codes;
                if (lane == b) my_scale = q.scale;
            } else {
                reinterpret_cast<uint2*>(p.h8 + size_t(r) * p.imax * 2)[(kb0 + b) * 32 + lane] =
                    make_uint2(pack_bf16x2(hv.x, hv.y), pack_bf16x2(hv.z, hv.w));
            }
        }
        if (FP8 && lane < nb) sf[kb0 + lane] = my_scale;
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
        if (fp8) moe_silu_quant_v2_kernel<true><<<grid, block, 0, stream>>>(p);
        else moe_silu_quant_v2_kernel<false><<<grid, block, 0, stream>>>(p);
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

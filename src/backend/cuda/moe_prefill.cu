// The MoE block's prefill path (launch_moe picks it for FP8 or BF16 experts at prefill-sized calls;
// see moe_kernels.cu): the grouped GEMMs run on CUTLASS's Hopper wgmma/TMA kernels (moe_cutlass.h),
// with FP8 activations for FP8 experts and bf16 ones for BF16 experts (the mma.sync path's
// rounding). Stages, one stream, no host synchronisation, CUDA-graph capturable:
//  1. moe_route_kernel (moe_route.cu), without the bf16 copy of x.
//  2. moe_sort_kernel (moe_route.cu), also writing the per-expert row offsets expert_off[E + 2]
//     and the inverse permutation row_pos[t·k + j] = sorted row of pair (t, j)
//     (row_pos[T·k + t] = the shared expert's row of token t).
//  3. moe_grouped_setup_kernel (moe_cutlass_gemm.cu): problem shapes and pointers of the groups.
//  4. moe_gather_quant_kernel: one warp per token reads x_t (fp32) once, quantises it to FP8 e4m3
//     with one scale per 128 columns (DeepSeek recipe: scale = amax/448, code = sat(x/scale)) and
//     stores the codes and scales at each of its k + 1 sorted rows (a8 [R, H], sfa [R, H/128]);
//     BF16 experts: bf16 rows instead, no scales.
//  5. grouped GEMM gate_up (2(E+1) groups) → gu [R, 2·Imax] bf16 (gate | up).
//  6. moe_silu_quant_kernel: one warp per sorted row: h = silu(g)·u (fp32 from the bf16 g, u),
//     quantised like x → h8 [R, Imax], sfh (BF16 experts: bf16 h).
//  7. grouped GEMM down (E+1 groups) → eo [R, H] bf16.
//  8. moe_combine_sorted_kernel: y_t = Σ_j w_tj · eo[row_pos[t·k+j]] (in j order)
//     + σ(sg_t) · eo[row_pos[T·k+t]].
// Error budget: the FP8 rounding of x and h (relative 2^-4 per element at worst, ~2^-5.6 rms)
// and the bf16 rounding of g, u and the expert outputs; NOTES.md (MoE) has the measured error.
#include "backend/cuda/moe_prefill.h"

#include <cuda_bf16.h>
#include <cuda_fp8.h>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/moe_common.cuh"
#include "backend/cuda/moe_cutlass.h"
#include "core/check.h"

namespace qs::cuda::moe {
namespace {

constexpr int kWarpsPerBlock = 8;

struct QuantCodes {
    uint32_t codes;  // four e4m3 codes, column order
    float scale;
};

// Quantises the warp's 128 consecutive values (4 per lane, lane order) with one scale.
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

struct GatherQuantParams {
    const float* x;       // [T, H]
    const int* row_pos;   // [T·(k+1)]
    int T, H, k;
    uint8_t* a8;          // [R, H] fp8 e4m3, or bf16 (FP8 = false)
    float* sfa;           // [R, H/128] (fp8)
};

// FP8: e4m3 codes + one scale per 128 columns; else bf16 (round to nearest even).
template <bool FP8>
__global__ __launch_bounds__(kWarpsPerBlock * 32) void moe_gather_quant_kernel(GatherQuantParams p) {
    const int lane = threadIdx.x & 31;
    const int t = blockIdx.x * kWarpsPerBlock + (threadIdx.x >> 5);
    if (t >= p.T) return;
    // Lane j < k holds the sorted row of pair (t, j); lane k the shared expert's (k <= 31 here).
    const int n = p.k + 1;
    const int my_row = lane < p.k ? p.row_pos[size_t(t) * p.k + lane] : lane == p.k ? p.row_pos[size_t(p.T) * p.k + t] : 0;
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

struct SiluQuantParams {
    const __nv_bfloat16* gu;  // [R, 2·Imax]: gate in [0, I_e), up in [Imax, Imax + I_e)
    int R, routed_rows, I, I_shared, imax;
    uint8_t* h8;              // [R, Imax] fp8 e4m3, or bf16 (FP8 = false)
    float* sfh;               // routed rows: I/128 scales each, then the shared rows: I_shared/128
};

__device__ __forceinline__ float4 bf16x4_to_float4(uint2 u) {
    const __nv_bfloat162 a = *reinterpret_cast<const __nv_bfloat162*>(&u.x);
    const __nv_bfloat162 b = *reinterpret_cast<const __nv_bfloat162*>(&u.y);
    const float2 fa = __bfloat1622float2(a), fb = __bfloat1622float2(b);
    return make_float4(fa.x, fa.y, fb.x, fb.y);
}

__device__ __forceinline__ float silu(float g) { return g / (1.0f + expf(-g)); }

template <bool FP8>
__global__ __launch_bounds__(kWarpsPerBlock * 32) void moe_silu_quant_kernel(SiluQuantParams p) {
    const int lane = threadIdx.x & 31;
    const int r = blockIdx.x * kWarpsPerBlock + (threadIdx.x >> 5);
    if (r >= p.R) return;
    const bool shared = r >= p.routed_rows;
    const int ie = shared ? p.I_shared : p.I;
    const int kb_n = ie / 128;
    float* sf = shared ? p.sfh + size_t(p.routed_rows) * (p.I / 128) + size_t(r - p.routed_rows) * kb_n
                       : p.sfh + size_t(r) * kb_n;
    const uint2* g = reinterpret_cast<const uint2*>(p.gu + size_t(r) * 2 * p.imax);
    const uint2* u = reinterpret_cast<const uint2*>(p.gu + size_t(r) * 2 * p.imax + p.imax);
    for (int kb = 0; kb < kb_n; ++kb) {
        const float4 gv = bf16x4_to_float4(g[kb * 32 + lane]);
        const float4 uv = bf16x4_to_float4(u[kb * 32 + lane]);
        const float4 hv = make_float4(silu(gv.x) * uv.x, silu(gv.y) * uv.y, silu(gv.z) * uv.z, silu(gv.w) * uv.w);
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

struct CombineSortedParams {
    const __nv_bfloat16* eo;         // [R, H]
    const int* row_pos;              // [T·(k+1)]
    const float* topk_w;             // [T, k]
    const float* shared_gate_logit;  // [T]
    int T, H, k;
    float* y;                        // [T, H]
};

__global__ __launch_bounds__(kCombineThreads) void moe_combine_sorted_kernel(CombineSortedParams p) {
    const int t = blockIdx.x;
    const float sg = 1.0f / (1.0f + expf(-p.shared_gate_logit[t]));
    const int h4 = p.H / 4;
    for (int c = threadIdx.x; c < h4; c += kCombineThreads) {
        float4 acc = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        for (int j = 0; j <= p.k; ++j) {
            const float w = j < p.k ? p.topk_w[size_t(t) * p.k + j] : sg;
            const int r = j < p.k ? p.row_pos[size_t(t) * p.k + j] : p.row_pos[size_t(p.T) * p.k + t];
            const float4 v = bf16x4_to_float4(reinterpret_cast<const uint2*>(p.eo + size_t(r) * p.H)[c]);
            acc.x += w * v.x;
            acc.y += w * v.y;
            acc.z += w * v.z;
            acc.w += w * v.w;
        }
        reinterpret_cast<float4*>(p.y + size_t(t) * p.H)[c] = acc;
    }
}

void record(cudaEvent_t* ev, int i, cudaStream_t s) {
    if (ev) QS_CUDA_CHECK(cudaEventRecord(ev[i], s));
}

}  // namespace

bool prefill_path_supported(const MoeParams& p) {
    const MoeExpertTable& x = p.experts;
    // top_k <= 31: the gather kernel keeps the k + 1 destination rows in one warp's lanes.
    const bool fmt = x.format == DeviceWeightFormat::kFP8Block || x.format == DeviceWeightFormat::kBF16;
    return cutlass_grouped_gemm_compiled() && fmt && x.H % 128 == 0 &&
           x.I % 128 == 0 && x.I_shared % 128 == 0 && x.I > 0 && x.I_shared > 0 && p.top_k <= 31;
}

bool prefill_path_chosen(const MoeParams& p) {
    if (p.gemm_path == 0 || p.tile_config >= 0) return false;
    if (!prefill_path_supported(p)) {
        QS_CHECK_MSG(p.gemm_path != 1 && p.gemm_path != 2, "launch_moe: the CUTLASS grouped GEMM path does not cover this call "
                                       "(FP8 or BF16 experts, multiples of 128, CUTLASS compiled in)");
        return false;
    }
    if (p.gemm_path == 1 || p.gemm_path == 2) return true;
    return double(p.T) * p.top_k / p.experts.E >=
           prefill_min_rows_per_expert(p.experts.format == DeviceWeightFormat::kFP8Block);
}

void launch_moe_prefill(const MoeParams& p, cudaStream_t stream, cudaEvent_t* ev) {
    const MoeExpertTable& x = p.experts;
    const int T = p.T, E = x.E, H = x.H, k = p.top_k;
    const int imax = std::max(x.I, x.I_shared);
    const int R = T * (k + 1);
    const bool fp8 = x.format == DeviceWeightFormat::kFP8Block;
    const WsLayout L = ws_layout(T, H, x.I, x.I_shared, E, k);
    unsigned char* ws = static_cast<unsigned char*>(p.workspace);
    int* topk_id = reinterpret_cast<int*>(ws + L.topk_id);
    float* topk_w = reinterpret_cast<float*>(ws + L.topk_w);
    int* expert_off = reinterpret_cast<int*>(ws + L.expert_off);
    int* row_pos = reinterpret_cast<int*>(ws + L.row_pos);

    record(ev, 0, stream);
    MoePlan pl;
    pl.route = RouteParams{p.x, p.router_logits, T, E, H, k, p.norm_topk_prob, topk_id, topk_w, nullptr, 1.0f};
    pl.route_grid = dim3((T + kRouteWarps - 1) / kRouteWarps);
    pl.route_vpl = E <= 32 ? 1 : E <= 64 ? 2 : E <= 128 ? 4 : E <= 256 ? 8 : 16;
    launch_route(pl, stream);
    record(ev, 1, stream);

    pl.sort = SortParams{topk_id, T, E, k, reinterpret_cast<int*>(ws + L.num_tiles), reinterpret_cast<int4*>(ws + L.work),
                         reinterpret_cast<int*>(ws + L.row_token), reinterpret_cast<int*>(ws + L.row_dest), expert_off, row_pos};
    launch_sort<CfgL128>(pl, stream);

    GroupedSetupParams gs{};
    gs.expert_off = expert_off;
    gs.E = E;
    gs.H = H;
    gs.I = x.I;
    gs.I_shared = x.I_shared;
    gs.gate = x.gate;
    gs.up = x.up;
    gs.down = x.down;
    gs.gate_scale = x.gate_scale;
    gs.up_scale = x.up_scale;
    gs.down_scale = x.down_scale;
    gs.act_bytes = fp8 ? 1 : 2;
    gs.a8 = ws + L.a8;
    gs.sfa = fp8 ? reinterpret_cast<const float*>(ws + L.sfa) : nullptr;
    gs.h8 = ws + L.hbuf;  // the mma.sync path's bf16 h buffer
    gs.sfh = fp8 ? reinterpret_cast<const float*>(ws + L.sfh) : nullptr;
    gs.gu = ws + L.gu;
    gs.eo = ws + L.eout;  // the mma.sync path's fp32 expert outputs hold the bf16 ones
    gs.arrays = ws + L.grouped_arrays;
    const double rows_per_expert = double(T) * k / E;
    const bool auto_pp = p.gemm_path == -1 && rows_per_expert < kPrefillPingpongBelowRowsPerExpert;
    gs.pingpong = fp8 && (p.gemm_path == 2 || auto_pp);
    launch_grouped_setup(gs, stream);

    const GatherQuantParams gq{p.x, row_pos, T, H, k, ws + L.a8, reinterpret_cast<float*>(ws + L.sfa)};
    const dim3 gq_grid((T + kWarpsPerBlock - 1) / kWarpsPerBlock);
    if (fp8) moe_gather_quant_kernel<true><<<gq_grid, kWarpsPerBlock * 32, 0, stream>>>(gq);
    else moe_gather_quant_kernel<false><<<gq_grid, kWarpsPerBlock * 32, 0, stream>>>(gq);
    QS_CUDA_CHECK_LAUNCH();
    record(ev, 2, stream);

    void* gemm_ws = ws + L.grouped_gemm_ws;
    if (fp8) launch_grouped_gemm_gate_up(gs, gemm_ws, stream);
    else launch_grouped_gemm_bf16(gs, true, gemm_ws, stream);
    const SiluQuantParams sq{reinterpret_cast<const __nv_bfloat16*>(ws + L.gu), R, T * k, x.I, x.I_shared, imax,
                             ws + L.hbuf, reinterpret_cast<float*>(ws + L.sfh)};
    const dim3 sq_grid((R + kWarpsPerBlock - 1) / kWarpsPerBlock);
    if (fp8) moe_silu_quant_kernel<true><<<sq_grid, kWarpsPerBlock * 32, 0, stream>>>(sq);
    else moe_silu_quant_kernel<false><<<sq_grid, kWarpsPerBlock * 32, 0, stream>>>(sq);
    QS_CUDA_CHECK_LAUNCH();
    record(ev, 3, stream);

    if (fp8) launch_grouped_gemm_down(gs, gemm_ws, stream);
    else launch_grouped_gemm_bf16(gs, false, gemm_ws, stream);
    record(ev, 4, stream);

    const CombineSortedParams cp{reinterpret_cast<const __nv_bfloat16*>(ws + L.eout), row_pos, topk_w,
                                 p.shared_gate_logit, T, H, k, p.y};
    moe_combine_sorted_kernel<<<T, kCombineThreads, 0, stream>>>(cp);
    QS_CUDA_CHECK_LAUNCH();
    record(ev, 5, stream);
}

}  // namespace qs::cuda::moe

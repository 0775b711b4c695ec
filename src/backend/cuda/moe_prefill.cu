// The MoE block's prefill path (launch_moe picks it for FP8 or BF16 experts at prefill-sized calls;
// see moe_kernels.cu): the grouped GEMMs run on CUTLASS's Hopper wgmma/TMA kernels (moe_cutlass.h),
// with FP8 activations for FP8 experts and bf16 ones for BF16 experts (the mma.sync path's
// rounding). Stages, one stream, no host synchronisation, CUDA-graph capturable:
//  1. moe_route_kernel (moe_route.cu), without the bf16 copy of x.
//  2. moe_sort_kernel (moe_route.cu; prefill_version 2: moe_prefill_stages.cu's histogram, scan
//     and stable scatter, three launches over many blocks), also writing the per-expert row offsets expert_off[E + 2]
//     and the inverse permutation row_pos[t·k + j] = sorted row of pair (t, j)
//     (row_pos[T·k + t] = the shared expert's row of token t).
//     INT4 experts without BF16 copies (MoeExpertTable::bf16_in_scratch): moe_int4_dequant.cu
//     writes the experts with routed rows into the device's BF16 scratch here, or with
//     int4_prefill_version 2 moe_int4_mixed_prep.cu their MN-major scales for the mixed-input
//     GEMMs (moe_cutlass_gemm_int4.cu, its own setup kernel; the codes read in place) of stages 5 and 7.
//  3. moe_grouped_setup_kernel (moe_cutlass_gemm.cu; INT4 mixed: moe_grouped_setup_int4_kernel):
//     problem shapes and pointers of the groups.
//  Stages 4, 6 and 8 are moe_prefill_stages.cu's (version 2: the same arithmetic, loads batched).
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
#include "backend/cuda/moe_int4_dequant.h"
#include "backend/cuda/moe_int4_mixed.h"
#include "backend/cuda/moe_prefill_stages.h"
#include "core/check.h"

namespace qs::cuda::moe {
namespace {

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
    QS_CHECK_MSG(p.gemm_path >= -1 && p.gemm_path <= 2, "launch_moe: gemm_path must be -1, 0, 1 or 2");
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

bool prefill_takes_int4_mixed(const MoeParams& p) {
    return p.int4_prefill_version == 2 && p.experts.bf16_in_scratch && moe_int4_mixed_supported(p.experts);
}

void launch_moe_prefill(const MoeParams& p, cudaStream_t stream, cudaEvent_t* ev) {
    QS_CHECK_MSG(p.prefill_version == 1 || p.prefill_version == 2, "launch_moe: prefill_version must be 1 or 2");
    QS_CHECK_MSG(p.int4_prefill_version == 1 || p.int4_prefill_version == 2, "launch_moe: int4_prefill_version must be 1 or 2");
    QS_CHECK_MSG(p.int4_mixed_tile >= -1 && p.int4_mixed_tile <= 2, "launch_moe: int4_mixed_tile must be -1, 0, 1 or 2");
    const MoeExpertTable& x = p.experts;
    const int T = p.T, E = x.E, H = x.H, k = p.top_k;
    const int imax = std::max(x.I, x.I_shared);
    const int R = T * (k + 1);
    const bool fp8 = x.format == DeviceWeightFormat::kFP8Block;
    const bool int4_mixed = prefill_takes_int4_mixed(p);
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

    // Version 2's per-block expert counts live in the bf16 copy of x, which this path never
    // writes (T·H·2 bytes: enough from T·H >= 2·E, so below that, a few tokens forced onto this
    // path, the one-block sort runs instead; the permutation differs only inside an expert).
    const int sort_blocks = prefill_sort_blocks(T, k, kPrefillSortChunk);
    const bool sort_v2 = p.prefill_version == 2 && size_t(sort_blocks) * E * 4 <= size_t(T) * H * 2 &&
                         E <= kPrefillSortMaxE;
    if (sort_v2) {
        launch_prefill_sort_v2(PrefillSortParams{topk_id, T, E, k, kPrefillSortChunk, reinterpret_cast<int*>(ws + L.xb),
                                                 expert_off, row_pos},
                               stream);
    } else {
        pl.sort = SortParams{topk_id, T, E, k, reinterpret_cast<int*>(ws + L.num_tiles), reinterpret_cast<int4*>(ws + L.work),
                             reinterpret_cast<int*>(ws + L.row_token), reinterpret_cast<int*>(ws + L.row_dest), expert_off, row_pos};
        launch_sort<CfgL128>(pl, stream);
    }

    // INT4 experts without BF16 copies: this layer's experts into the scratch the groups point
    // to, those with routed rows only (expert_off is written by now): as BF16 values, or as the
    // mixed-input GEMMs' signed codes and MN-major scales.
    if (int4_mixed) launch_moe_int4_mixed_prep(x, expert_off, stream);
    else if (x.bf16_in_scratch) launch_moe_int4_dequant(x, expert_off, stream);

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
    if (int4_mixed) launch_grouped_setup_int4(gs, int4_mixed_operands(x), stream);
    else launch_grouped_setup(gs, stream);

    launch_prefill_gather(GatherQuantParams{p.x, row_pos, T, H, k, ws + L.a8, reinterpret_cast<float*>(ws + L.sfa)}, fp8,
                          p.prefill_version, stream);
    record(ev, 2, stream);

    void* gemm_ws = ws + L.grouped_gemm_ws;
    const int int4_tile = p.int4_mixed_tile >= 0 ? p.int4_mixed_tile
                          : double(T) * k / E >= kInt4MixedWideRowsPerExpert ? 2 : 0;
    if (fp8) launch_grouped_gemm_gate_up(gs, gemm_ws, stream);
    else if (int4_mixed) launch_grouped_gemm_int4(gs, true, x.int4_group, int4_tile, gemm_ws, stream);
    else launch_grouped_gemm_bf16(gs, true, gemm_ws, stream);
    const SiluQuantParams sq{reinterpret_cast<const __nv_bfloat16*>(ws + L.gu), R, T * k, x.I, x.I_shared, imax,
                             ws + L.hbuf, reinterpret_cast<float*>(ws + L.sfh)};
    launch_prefill_silu(sq, fp8, p.prefill_version, stream);
    record(ev, 3, stream);

    if (fp8) launch_grouped_gemm_down(gs, gemm_ws, stream);
    else if (int4_mixed) launch_grouped_gemm_int4(gs, false, x.int4_group, int4_tile, gemm_ws, stream);
    else launch_grouped_gemm_bf16(gs, false, gemm_ws, stream);
    record(ev, 4, stream);

    const CombineSortedParams cp{reinterpret_cast<const __nv_bfloat16*>(ws + L.eout), row_pos, topk_w,
                                 p.shared_gate_logit, T, H, k, p.y};
    launch_prefill_combine(cp, p.prefill_version, stream);
    record(ev, 5, stream);
}

}  // namespace qs::cuda::moe

// Sparse MoE block on the GPU: routing, sort by expert, grouped GEMMs, combine.
// CPU reference: CpuOps::moe (src/backend/cpu/cpu_moe.cpp); maths in moe_kernels.h.
//
// Stages (one stream, no host synchronisation; the host never learns per-expert counts):
//  1. moe_route_kernel   grid ceil(T/8) × 256 threads, one warp per token: fp32 softmax over E,
//                        top-k (ties to the lower index), renormalisation → topk_id/topk_w [T, k];
//                        also x [T, H] fp32 → xb [T, H] bf16 (the GEMM's A operand).
//  2. moe_sort_kernel<BM> one block of 1024 threads: per-expert counts (shared atomics), exclusive
//                        scans, the tile list (one int4 {expert, first sorted row, rows, 0} per
//                        BM-row tile of each non-empty expert; the shared expert is expert E with
//                        rows T·k + t for every token t), and the scatter of the pairs:
//                        row_token[r] = t, row_dest[r] = t·k + j (T·k + t for the shared expert).
//                        Rows of one expert are in atomic (arbitrary) order; every row's arithmetic
//                        is independent of its position, so the result is bitwise deterministic.
//  3. moe_gemm_kernel<gate_up>  grid (max(I, I_shared)/BN, max_tiles), blocks past the tile count
//                        (or past the expert's I_e) exit at once. Block = one (tile, BN columns of
//                        I_e): A = BM gathered rows of xb, B = gate rows [n0, n0+BN) and up rows
//                        [n0, n0+BN) of the expert; epilogue h = silu(g)·u → hbuf [R, Imax] bf16.
//  4. moe_gemm_kernel<down>     grid (H/BNW, max_tiles): A = hbuf rows of the tile (contiguous), B =
//                        down rows [n0, n0+BNW), K = I_e; epilogue writes fp32 rows
//                        eout[row_dest[r], n0..] (eout [T·(k+1), H]).
//  5. moe_combine_kernel grid T: y_t = Σ_j w_tj · eout[t·k+j] (in j order) + σ(sg_t) · eout[T·k+t].
//
// GEMM: mma.sync m16n8k16 bf16 → fp32, BK = 64, a STAGES-deep cp.async (16-byte, L2-only)
// pipeline. K is permuted consistently for A and B inside each k16 step so that every fragment
// comes from one 16-byte shared-memory load: in a 64-wide K stage, lane (g = lane/4, q = lane%4),
// half h and k16 step s hold fragment positions {2q, 2q+1, 2q+8, 2q+9} = actual k 16q+8h+4s+{0..3}.
// Shared layouts: A rows 128 B (64 bf16), 16-byte chunk c of row m stored at chunk c ^ (m & 1)
// (conflict-free for that access pattern); B rows 128 B (bf16, same swizzle) or 64 B (fp8, plain).
// FP8 (e4m3, 128×128 block scale_inv): weights become bf16 exactly, up to a power of two (bit moves,
// see e4m3x4_to_bf16x2_scaled), the MMA accumulates each 128-wide K block into a temporary, and the
// temporary is added to the accumulator times the block's scale_inv (a BN- or BNW-row tile lies
// inside one 128-row scale block); the fp8 path's A operands carry a 2^64 factor (kFp8AScale).
// Tile configurations (BM rows × BNW weight rows): decode 16×64 (a few tokens: more blocks),
// 16×128 or 32×128 with 4 warps (1×4), prefill 128×128 with 8 warps (2×4); chosen from T·k/E by the
// host (MoeParams::tile_config).
// Files: moe_common.cuh (parameters, layout, plan), moe_route.cu (1, 2), moe_gemm.cu (3, 4),
// moe_combine.cu (5), this file (shape checks, the plan, the launch sequence, public API).
// MoeParams::decode_version 2 replaces stages 3-4 by moe_decode_gemm.cu's kernels (32-row tiles,
// weights as the MMA's 16-row operand, tokens in 8-row groups); MoeParams::int4_grouped 1 (INT4
// experts, kMoeSmallTMax < T <= int4_grouped_max_t) replaces them by moe_decode_gemm_int4.cu's
// (the same tiles and operand roles, 4-bit weights unpacked in registers) ahead of the prefill path.
// T <= kMoeSmallTMax (chosen by small_path_chosen) takes the small-T path instead: moe_small.cu
// (route + expert list, gate_up, down + combine; three launches, no sort, no tile list); its
// version 2 (MoeParams::small_version) also computes the router logits (moe_small_route.cu).
// All of them also compile as host C++ for the CPU emulation test (bench/kernels/moe_emu.cpp).
#include "backend/cuda/moe_kernels.h"

#include <algorithm>
#include <cuda_bf16.h>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/moe_common.cuh"
#include "core/check.h"
#if !defined(QS_MOE_EMULATE)
#include "backend/cuda/moe_int4_dequant.h"
#include "backend/cuda/moe_prefill.h"
#endif

namespace qs::cuda {

namespace moe {
namespace {

// Checks the shapes and picks the tile configuration (T > 0).
int check_and_choose_config(const MoeParams& p) {
    const MoeExpertTable& x = p.experts;
    QS_CHECK_MSG(x.E >= 1 && x.E <= 512, "launch_moe: 1 <= E <= 512");
    QS_CHECK_MSG(p.top_k >= 1 && p.top_k <= 32 && p.top_k <= x.E, "launch_moe: 1 <= top_k <= min(32, E)");
    QS_CHECK_MSG(x.H >= 128 && x.H % 128 == 0, "launch_moe: H must be a multiple of 128");
    QS_CHECK_MSG(x.I >= 64 && x.I % 64 == 0 && x.I_shared >= 64 && x.I_shared % 64 == 0,
                 "launch_moe: I and I_shared must be multiples of 64");
    QS_CHECK_MSG(x.format == DeviceWeightFormat::kBF16 || x.format == DeviceWeightFormat::kFP8Block,
                 "launch_moe: weight format");
    QS_CHECK(x.gate && x.up && x.down);
    QS_CHECK(x.format != DeviceWeightFormat::kFP8Block || (x.gate_scale && x.up_scale && x.down_scale));
    QS_CHECK_MSG(x.format != DeviceWeightFormat::kFP8Block ||
                     std::max({x.H, x.I, x.I_shared}) <= int64_t(128) * moe::kMaxScaleBlocks,
                 "launch_moe: fp8 experts need H, I and I_shared <= 128 · kMaxScaleBlocks (4,096)");
    QS_CHECK(p.x && p.y && p.workspace);
    QS_CHECK_MSG((p.router_logits && p.shared_gate_logit) || moe_computes_router(p),
                 "launch_moe: router_logits and shared_gate_logit must be set (or small_version 2 with router weights)");
    QS_CHECK_MSG(reinterpret_cast<uintptr_t>(p.workspace) % 256 == 0, "launch_moe: workspace must be 256-aligned");
    QS_CHECK_MSG(reinterpret_cast<uintptr_t>(p.x) % 16 == 0 && reinterpret_cast<uintptr_t>(p.y) % 16 == 0,
                 "launch_moe: x and y must be 16-byte aligned");
    QS_CHECK_MSG(int64_t(p.T) * (p.top_k + 1) * std::max<int64_t>(x.H, std::max(x.I, x.I_shared)) < (int64_t(1) << 31),
                 "launch_moe: T too large for 32-bit row indices");
    int cfg = p.tile_config;
    if (cfg < 0) {
        // From moe_lab on the H200 (bench/kernels/NOTES.md, 2026-11-30): 32-row tiles (1) beat
        // 128-row ones (2) at 128 rows per expert in bf16 (-5 %) and at every prefill size in fp8
        // (-17 % at 128, -5 % at 512 rows per expert); 128-row tiles win in bf16 at 512 (-9 %).
        // The bf16 switch at 256 is between the two measured points. Every configuration gives
        // bit-identical results (the lab checks), so this only moves time.
        const double rows_per_expert = double(p.T) * p.top_k / x.E;
        const bool fp8 = x.format == DeviceWeightFormat::kFP8Block;
        cfg = rows_per_expert <= 0.125 ? 3 : rows_per_expert <= 10.0 ? 0 : (fp8 || rows_per_expert <= 256.0) ? 1 : 2;
    }
    QS_CHECK_MSG(cfg >= 0 && cfg <= 3, "launch_moe: tile_config");
    const int64_t bm = cfg == 1 ? 32 : cfg == 2 ? 128 : 16;
    QS_CHECK_MSG(max_tiles_for(bm, p.T, x.E, p.top_k) <= 65535, "launch_moe: too many tiles for grid.y");
    return cfg;
}

}  // namespace

MoePlan make_plan(const MoeParams& p) {
    MoePlan pl;
    QS_CHECK_MSG(p.decode_version == 1 || p.decode_version == 2, "launch_moe: decode_version must be 1 or 2");
    pl.cfg = check_and_choose_config(p);
    // Decode v2 (moe_decode_gemm.cu) runs on 32-row tiles whatever T is; an explicit tile_config
    // keeps moe_gemm.cu's kernels (the lab's per-configuration runs).
    pl.decode_v2 = p.decode_version == 2 && p.tile_config < 0;
    // The INT4 grouped GEMMs (moe_decode_gemm_int4.cu) run on the same 32-row tiles.
    pl.int4 = int4_grouped_chosen(p);
    if (pl.int4) pl.decode_v2 = false;
    if (pl.decode_v2 || pl.int4) pl.cfg = 1;
    pl.fp8 = p.experts.format == DeviceWeightFormat::kFP8Block;
    const int bm = pl.cfg == 0 ? CfgS16::BM : pl.cfg == 1 ? CfgS32::BM : pl.cfg == 2 ? CfgL128::BM : CfgS16N::BM;
    const int bnw = pl.cfg == 0 ? CfgS16::BNW : pl.cfg == 1 ? CfgS32::BNW : pl.cfg == 2 ? CfgL128::BNW : CfgS16N::BNW;
    const MoeExpertTable& x = p.experts;
    const int T = p.T, E = x.E, H = x.H, k = p.top_k;
    const int imax = std::max(x.I, x.I_shared);
    const WsLayout L = ws_layout(T, H, x.I, x.I_shared, E, k);
    unsigned char* ws = static_cast<unsigned char*>(p.workspace);
    int* topk_id = reinterpret_cast<int*>(ws + L.topk_id);
    float* topk_w = reinterpret_cast<float*>(ws + L.topk_w);
    __nv_bfloat16* xb = reinterpret_cast<__nv_bfloat16*>(ws + L.xb);
    int* num_tiles = reinterpret_cast<int*>(ws + L.num_tiles);
    int4* work = reinterpret_cast<int4*>(ws + L.work);
    int* row_token = reinterpret_cast<int*>(ws + L.row_token);
    int* row_dest = reinterpret_cast<int*>(ws + L.row_dest);
    __nv_bfloat16* hbuf = reinterpret_cast<__nv_bfloat16*>(ws + L.hbuf);
    float* eout = reinterpret_cast<float*>(ws + L.eout);

    pl.route = RouteParams{p.x, p.router_logits, T, E, H, k, p.norm_topk_prob, topk_id, topk_w, xb,
                           pl.fp8 ? kFp8AScale : 1.0f};
    pl.route_grid = dim3((T + kRouteWarps - 1) / kRouteWarps);
    pl.route_vpl = E <= 32 ? 1 : E <= 64 ? 2 : E <= 128 ? 4 : E <= 256 ? 8 : 16;

    pl.sort = SortParams{topk_id, T, E, k, num_tiles, work, row_token, row_dest};

    const int max_tiles = int(max_tiles_for(bm, T, E, k));
    GemmParams& gu = pl.gate_up;
    gu.work = work;
    gu.num_tiles = num_tiles;
    gu.a = xb;
    gu.lda = H;
    gu.row_token = row_token;
    gu.w0 = x.gate;
    gu.w1 = x.up;
    gu.s0 = x.gate_scale;
    gu.s1 = x.up_scale;
    gu.E = E;
    gu.H = H;
    gu.I = x.I;
    gu.I_shared = x.I_shared;
    gu.h_out = hbuf;
    gu.ldh = imax;
    pl.gemm_up_grid = dim3(imax / (bnw / 2), max_tiles);

    GemmParams& dn = pl.down;
    dn.work = work;
    dn.num_tiles = num_tiles;
    dn.a = hbuf;
    dn.lda = imax;
    dn.row_dest = row_dest;
    dn.w0 = x.down;
    dn.s0 = x.down_scale;
    dn.E = E;
    dn.H = H;
    dn.I = x.I;
    dn.I_shared = x.I_shared;
    dn.y_out = eout;
    pl.gemm_down_grid = dim3(H / bnw, max_tiles);
    QS_CHECK_MSG(p.decode_pdl == 0 || p.decode_pdl == 1, "launch_moe: decode_pdl must be 0 or 1");
    pl.down_pdl = (pl.decode_v2 || pl.int4) && p.decode_pdl == 1;
    QS_CHECK_MSG(p.decode_eout_bf16 == 0 || p.decode_eout_bf16 == 1, "launch_moe: decode_eout_bf16 must be 0 or 1");
    if (pl.int4) {
        gu.q0 = x.gate_q;
        gu.q1 = x.up_q;
        gu.qs0 = x.gate_qs;
        gu.qs1 = x.up_qs;
        gu.qgroup = x.int4_group;
        dn.q0 = x.down_q;
        dn.qs0 = x.down_qs;
        dn.qgroup = x.int4_group;
        if (x.nvfp4) gu.qglobal = dn.qglobal = x.nvfp4_global;
    }

    pl.combine = CombineParams{eout, topk_w, p.shared_gate_logit, T, H, k, p.y};
    if ((pl.decode_v2 || pl.int4) && p.decode_eout_bf16 == 1) {  // the same workspace region, half of it
        dn.y_out16 = reinterpret_cast<__nv_bfloat16*>(eout);
        pl.combine.eout16 = dn.y_out16;
    }
    pl.combine_grid = dim3(T);
    return pl;
}

bool int4_grouped_chosen(const MoeParams& p) {
    QS_CHECK_MSG(p.int4_grouped == 0 || p.int4_grouped == 1, "launch_moe: int4_grouped must be 0 or 1");
    if (p.int4_grouped == 0 || p.experts.gate_q == nullptr || !moe_int4_grouped_supported(p.experts)) return false;
    QS_CHECK_MSG(p.experts.format == DeviceWeightFormat::kBF16, "launch_moe: INT4 experts sit beside BF16 copies");
    return p.T >= 1 && p.T <= p.int4_grouped_max_t && p.tile_config < 0 && p.gemm_path < 0 && !small_path_chosen(p);
}

bool small_path_chosen(const MoeParams& p) {
    QS_CHECK_MSG(p.small_t >= -1 && p.small_t <= 1, "launch_moe: small_t must be -1, 0 or 1");
    QS_CHECK_MSG(p.small_version == 1 || p.small_version == 2, "launch_moe: small_version must be 1 or 2");
    if (p.small_t == 1) {
        QS_CHECK_MSG(p.T >= 1 && p.T <= kMoeSmallTMax, "launch_moe: small_t = 1 needs 1 <= T <= kMoeSmallTMax");
        return true;
    }
    return p.small_t == -1 && p.T >= 1 && p.T <= kMoeSmallTMax && p.tile_config < 0 && p.gemm_path < 0;
}

// Version 2 of the small-T down kernel's shared memory (moe_small_down_slots.cu): the plan,
// pointers, scales, routing weights, dots, every h row, and the lanes' rings. False (d reset) where
// the shapes do not fit it: the call runs version 1.
// 4-bit experts (int4: moe_small_int4.cu's down_slots_kernel): 8-byte pieces of 16 codes per lane, no
// ring (the pieces of a batch of slots sit in registers) and no FP8 scales; the scale area holds the
// slots' NVFP4 globals.
bool down_slots_layout(const MoeExpertTable& x, int T, int k, bool fp8, bool int4, DownSlotsLayout& d) {
    d = DownSlotsLayout{};
    const int max_slots = int(small_max_slots(T, x.E, k)), ldh = std::max(x.I, x.I_shared);
    const int vpc = int4 ? 16 : fp8 ? 16 : 8, nch = ldh / vpc;
    d.max_slots = max_slots;
    d.cpl = (nch + 31) / 32;
    d.kb = (ldh + 127) / 128;
    size_t off = 0;
    auto take = [&](size_t bytes, size_t align) {
        off = (off + align - 1) / align * align;
        const int at = int(off);
        off += bytes;
        return at;
    };
    d.off_expert = take(size_t(max_slots) * 4, 4);
    d.off_count = take(size_t(max_slots) * 4, 4);
    d.off_dest = take(size_t(max_slots) * T * 4, 4);
    d.off_wptr = take(size_t(max_slots) * 8, 8);
    d.off_sptr = take(size_t(max_slots) * 8, 8);
    d.off_scale = take(int4 ? size_t(max_slots) * 4 : fp8 ? size_t(max_slots) * d.kb * 4 : 0, 4);
    d.off_topw = take(size_t(T) * k * 4, 4);
    d.off_sg = take(size_t(T) * 4, 4);
    d.off_dots = take(size_t(kSmallCols) * T * (k + 1) * 4, 4);
    d.off_h = take(size_t(T) * (k + 1) * ldh * 2, 16);
    d.off_ring = take(int4 ? 0 : size_t(kSmallCols) * kDownSlotsRing * d.cpl * 32 * 16, 16);
    d.bytes = int(off);
    const bool fits = d.cpl <= 2 && ldh % 8 == 0 && x.I % vpc == 0 && x.I_shared % vpc == 0 &&
                      (!int4 || (x.int4_group > 0 && x.int4_group % 8 == 0)) && off <= size_t(200) * 1024;
    if (!fits) d = DownSlotsLayout{};
    return fits;
}

SmallPlan make_small_plan(const MoeParams& p) {
    check_and_choose_config(p);  // the same shape checks as the other paths
    QS_CHECK(p.T >= 1 && p.T <= kMoeSmallTMax && p.T <= kRouteWarps);
    const MoeExpertTable& x = p.experts;
    const int T = p.T, E = x.E, H = x.H, k = p.top_k;
    QS_CHECK_MSG(T * k <= kSmallThreads, "launch_moe: T·top_k too large for the small-T path");
    static_assert(128 % kSmallRows == 0 && 128 % kSmallCols == 0, "fp8 slices inside one 128-row scale block");
    const WsLayout L = ws_layout(T, H, x.I, x.I_shared, E, k);
    unsigned char* ws = static_cast<unsigned char*>(p.workspace);
    const int max_slots = int(small_max_slots(T, E, k));
    int* plan = reinterpret_cast<int*>(ws + L.small_plan);
    SmallPlan pl;
    pl.fp8 = x.format == DeviceWeightFormat::kFP8Block;
    pl.int4 = x.gate_q != nullptr;
    if (pl.int4) {
        QS_CHECK_MSG(x.format == DeviceWeightFormat::kBF16 && x.up_q && x.down_q && x.gate_qs && x.up_qs && x.down_qs,
                     "launch_moe: INT4 experts need all six arrays beside BF16 copies");
        const int g = x.int4_group;
        QS_CHECK_MSG(H % 32 == 0 && x.I % 16 == 0 && x.I_shared % 16 == 0 && g > 0 && g % 8 == 0 && H % g == 0 &&
                         x.I % g == 0 && x.I_shared % g == 0,
                     "launch_moe: INT4 experts need H % 32, I % 16 == 0 and a group (multiple of 8) dividing H and I");
        pl.nvfp4 = x.nvfp4;
        QS_CHECK_MSG(!x.nvfp4 || (g == 16 && x.nvfp4_global),
                     "launch_moe: NVFP4 experts need group 16 and their global multipliers");
    }
    pl.route_vpl = E <= 32 ? 1 : E <= 64 ? 2 : E <= 128 ? 4 : E <= 256 ? 8 : 16;
    pl.version = p.small_version;
    SmallParams& s = pl.p;
    s.x = p.x;
    s.router_logits = p.router_logits;
    s.shared_gate_logit = p.shared_gate_logit;
    if (pl.version == 2) {
        QS_CHECK_MSG(p.router_weight && p.shared_gate_weight,
                     "launch_moe: small_version 2 needs router_weight and shared_gate_weight");
        QS_CHECK_MSG(reinterpret_cast<uintptr_t>(p.router_weight) % 16 == 0 &&
                         reinterpret_cast<uintptr_t>(p.shared_gate_weight) % 16 == 0,
                     "launch_moe: router_weight and shared_gate_weight must be 16-byte aligned");
        s.router_w = p.router_weight;
        s.sgate_w = p.shared_gate_weight;
        s.logits_out = reinterpret_cast<float*>(ws + L.small_logits);
        s.sg_out = reinterpret_cast<float*>(ws + L.small_sg);
        s.router_logits = s.logits_out;
        s.shared_gate_logit = s.sg_out;
        pl.zero_counter = p.small_counter == nullptr;
        s.counter = p.small_counter ? p.small_counter : reinterpret_cast<int*>(ws + L.small_counter);
        pl.router_blocks = E + 1;  // one router row (or the shared-expert gate) per block
    }
    s.gate = x.gate;
    s.up = x.up;
    s.down = x.down;
    s.gate_scale = x.gate_scale;
    s.up_scale = x.up_scale;
    s.down_scale = x.down_scale;
    s.gate_q = x.gate_q;
    s.up_q = x.up_q;
    s.down_q = x.down_q;
    s.gate_qs = x.gate_qs;
    s.up_qs = x.up_qs;
    s.down_qs = x.down_qs;
    s.qgroup = x.int4_group;
    s.qglobal = x.nvfp4 ? x.nvfp4_global : nullptr;
    s.T = T;
    s.E = E;
    s.H = H;
    s.I = x.I;
    s.I_shared = x.I_shared;
    s.k = k;
    s.norm_topk_prob = p.norm_topk_prob;
    s.topk_id = reinterpret_cast<int*>(ws + L.topk_id);
    s.topk_w = reinterpret_cast<float*>(ws + L.topk_w);
    s.n_slots = plan;
    s.slot_expert = plan + 1;
    s.slot_count = plan + 1 + max_slots;
    s.slot_dest = plan + 1 + 2 * max_slots;
    s.h = reinterpret_cast<__nv_bfloat16*>(ws + L.hbuf);
    s.ldh = std::max(x.I, x.I_shared);
    s.y = p.y;
    const int bucket = T <= 1 ? 1 : T <= 2 ? 2 : T <= 4 ? 4 : 8;  // token_bucket in moe_small.cu
    pl.nmax = bucket;
    pl.gate_up_smem = size_t(bucket) * small_x_row_floats(H) * 4;
    pl.gate_up_grid = dim3(s.ldh / kSmallRows, max_slots);
    pl.down_grid = dim3(T, H / kSmallCols);
    const size_t h_rows_bytes = size_t(k + 1) * size_t(s.ldh) * 2;
    s.down_h_smem = h_rows_bytes <= 48 * 1024 ? 1 : 0;  // 9 KB for the real model; no opt-in needed
    pl.down_smem = s.down_h_smem ? h_rows_bytes : 0;
    s.prefetch_down = p.small_prefetch_down != 0 ? 1 : 0;
    s.eout_bf16 = p.decode_eout_bf16 == 1 ? 1 : 0;
    QS_CHECK_MSG(p.small_down_version == 1 || p.small_down_version == 2, "launch_moe: small_down_version must be 1 or 2");
    QS_CHECK_MSG(p.small_int4_gate_up_version == 1 || p.small_int4_gate_up_version == 2,
                 "launch_moe: small_int4_gate_up_version must be 1 or 2");
    if (pl.int4 && p.small_int4_gate_up_version == 2 && small_int4_gate_up_mma_fits(x) &&
        reinterpret_cast<uintptr_t>(p.x) % 16 == 0) {
        pl.gate_up_mma = true;
        pl.gate_up_smem = small_int4_gate_up_mma_smem(bucket, H);
    }
    if (p.small_down_version == 2 && down_slots_layout(x, T, k, pl.fp8, pl.int4, s.down_slots)) {
        pl.down_version = 2;
        pl.down_grid = dim3(H / kSmallCols);  // a block per 8 columns of every token
    }
    return pl;
}

}  // namespace moe

bool moe_int4_grouped_supported(const MoeExpertTable& x) {
    const int g = x.int4_group;
    if (!(x.gate_q && x.up_q && x.down_q && x.gate_qs && x.up_qs && x.down_qs)) return false;
    // NVFP4: group 16 inside each 64-wide K stage (one block per lane's 16 values).
    if (x.nvfp4)
        return g == 16 && x.nvfp4_global && x.H % moe::kBK == 0 && x.I % moe::kBK == 0 && x.I_shared % moe::kBK == 0;
    return g >= moe::kBK && g % moe::kBK == 0 && x.H % g == 0 && x.I % g == 0 && x.I_shared % g == 0;
}

bool moe_computes_router(const MoeParams& p) {
    return p.small_version == 2 && p.T >= 1 && moe::small_path_chosen(p);
}

bool moe_takes_small_path(const MoeParams& p) { return p.T >= 1 && moe::small_path_chosen(p); }

bool moe_takes_small_down_slots(const MoeParams& p) {
    moe::DownSlotsLayout d;
    return moe_takes_small_path(p) && p.small_down_version == 2 && p.experts.format != DeviceWeightFormat::kF32 &&
           moe::down_slots_layout(p.experts, p.T, p.top_k, p.experts.format == DeviceWeightFormat::kFP8Block,
                                  p.experts.gate_q != nullptr, d);
}

bool moe_takes_small_int4_gate_up_mma(const MoeParams& p) {
    return moe_takes_small_path(p) && p.small_int4_gate_up_version == 2 && moe::small_int4_gate_up_mma_fits(p.experts) &&
           reinterpret_cast<uintptr_t>(p.x) % 16 == 0;
}

#if !defined(QS_MOE_EMULATE)
namespace {

using namespace moe;

void record(cudaEvent_t* ev, int i, cudaStream_t s) {
    if (ev) QS_CUDA_CHECK(cudaEventRecord(ev[i], s));
}

template <class Cfg>
void launch_sort_and_gemms(const MoePlan& pl, cudaStream_t stream, cudaEvent_t* ev) {
    launch_sort<Cfg>(pl, stream);
    record(ev, 2, stream);
    // Programmatic dependent launch of down only when nothing is recorded between the two (profiling).
    const bool pdl = pl.down_pdl && ev == nullptr;
    if (pl.int4) {  // cfg 1's tile list and grids (make_plan)
        launch_int4_gemm<true>(pl.gate_up, pl.gemm_up_grid, stream, false);
        record(ev, 3, stream);
        launch_int4_gemm<false>(pl.down, pl.gemm_down_grid, stream, pdl);
        record(ev, 4, stream);
        return;
    }
    if (pl.decode_v2) {  // cfg 1's tile list and grids (make_plan)
        if (pl.fp8) launch_decode_gemm<true, true>(pl.gate_up, pl.gemm_up_grid, stream, false);
        else launch_decode_gemm<false, true>(pl.gate_up, pl.gemm_up_grid, stream, false);
        record(ev, 3, stream);
        if (pl.fp8) launch_decode_gemm<true, false>(pl.down, pl.gemm_down_grid, stream, pdl);
        else launch_decode_gemm<false, false>(pl.down, pl.gemm_down_grid, stream, pdl);
        record(ev, 4, stream);
        return;
    }
    if (pl.fp8) launch_gemm<Cfg, true, true>(pl.gate_up, pl.gemm_up_grid, stream);
    else launch_gemm<Cfg, false, true>(pl.gate_up, pl.gemm_up_grid, stream);
    record(ev, 3, stream);
    if (pl.fp8) launch_gemm<Cfg, true, false>(pl.down, pl.gemm_down_grid, stream);
    else launch_gemm<Cfg, false, false>(pl.down, pl.gemm_down_grid, stream);
    record(ev, 4, stream);
}

void launch_impl(const MoeParams& p, cudaStream_t stream, cudaEvent_t* ev) {
    QS_CHECK(p.T >= 0);
    if (p.T == 0) {
        for (int i = 0; i < 6; ++i) record(ev, i, stream);
        return;
    }
    if (small_path_chosen(p)) {
        const SmallPlan pl = make_small_plan(p);
        record(ev, 0, stream);
        launch_small(pl, stream, ev);
        return;
    }
    if (!int4_grouped_chosen(p) && prefill_path_chosen(p)) {
        check_and_choose_config(p);  // the same shape checks
        launch_moe_prefill(p, stream, ev);
        return;
    }
    const MoePlan pl = make_plan(p);
    record(ev, 0, stream);
    // INT4 experts without BF16 copies: the mma.sync BF16 GEMMs read the layer's scratch copy.
    if (p.experts.bf16_in_scratch && !pl.int4) launch_moe_int4_dequant(p.experts, nullptr, stream);
    launch_route(pl, stream);
    record(ev, 1, stream);
    if (pl.cfg == 0) launch_sort_and_gemms<CfgS16>(pl, stream, ev);
    else if (pl.cfg == 1) launch_sort_and_gemms<CfgS32>(pl, stream, ev);
    else if (pl.cfg == 2) launch_sort_and_gemms<CfgL128>(pl, stream, ev);
    else launch_sort_and_gemms<CfgS16N>(pl, stream, ev);
    launch_combine(pl, stream);
    record(ev, 5, stream);
}

}  // namespace

size_t moe_workspace_bytes(int64_t T, int64_t H, int64_t I, int64_t I_shared, int64_t E, int64_t top_k) {
    return ws_layout(T, H, I, I_shared, E, top_k).total;
}

void launch_moe(const MoeParams& p, cudaStream_t stream) { launch_impl(p, stream, nullptr); }

bool moe_takes_int4_mixed(const MoeParams& p) {
    return p.T >= 1 && !small_path_chosen(p) && !int4_grouped_chosen(p) && prefill_path_chosen(p) &&
           prefill_takes_int4_mixed(p);
}

void launch_moe_profiled(const MoeParams& p, cudaStream_t stream, cudaEvent_t events[6]) {
    launch_impl(p, stream, events);
}

#endif  // !QS_MOE_EMULATE

}  // namespace qs::cuda

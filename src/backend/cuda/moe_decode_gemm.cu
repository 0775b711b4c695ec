// MoE decode grouped GEMMs, version 2 (MoeParams::decode_version = 2; bench/kernels/NOTES.md
// "Decode v2"): the same tile list (sort with 32-row tiles), loaders, shared layouts, cp.async
// pipeline and block scaling as moe_gemm.cu's CfgS32 kernel, with the MMA operands swapped: the
// weights are the m16 operand (16 weight rows per fragment) and the tile's tokens the n8 operand.
// Why: at decode sizes an expert has ~16 rows (T = 512, top-8 of 256), so the 32-row A tile of
// moe_gemm.cu runs half its MMAs on zero rows; here a warp skips every 8-token column group past
// the tile's row count (16 rows: half the MMAs; 9 rows: 2 groups of 4). The fp8 block promotion
// also runs once per 128-wide K block on a fresh zero accumulator (no per-element zeroing moves).
// Results are not bitwise equal to moe_gemm.cu's (each MMA sums the same products in the
// hardware's order for its operand roles); both sit within the same CPU-reference bounds.
// fp8 weights are copied two K steps (one 128-wide scale block) at a time, by whole 128-byte row
// pieces (load_pair): the fp8 GEMMs with 64-byte pieces ran at half of bf16's bytes per second
// (NOTES.md "Decode v2: whole-line fp8 copies").
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/device_limits.h"
#include "backend/cuda/moe_common.cuh"
#include "backend/cuda/moe_group_count.cuh"
#include "backend/cuda/moe_fp8_operand.cuh"
#if !defined(QS_MOE_EMULATE)
#include "backend/cuda/ptx_helpers.cuh"  // the emulation shim defines qs::cuda::ptx itself
#endif
#include "backend/cuda/moe_ring.cuh"

namespace qs::cuda::moe {
namespace {

using ptx::cp_async16;
using ptx::cp_async_commit;
using ptx::cp_async_wait;
using ptx::mma_16816_bf16;
using ptx::smem_u32;

using DecCfg = CfgS32;  // tiles of up to 32 rows (tokens), 128 weight rows, 4 warps

// Block = one (tile, 128 weight rows); warp w owns shared weight rows [32w, 32w + 32) as two m16
// fragments (gate_up: fragment 0 = gate rows, fragment 1 = the up rows of the same 16 columns,
// the loader's layout), and every valid 8-token group of the tile.
template <bool FP8, bool GATE_UP>
__global__ __launch_bounds__(GemmShape<DecCfg, FP8>::NTHR) void moe_decode_gemm_kernel(GemmParams p) {
    using S = GemmShape<DecCfg, FP8>;
    constexpr int BM = DecCfg::BM, BNW = DecCfg::BNW, NTHR = S::NTHR, STAGES = S::STAGES;
    constexpr int MT = 2, NG = BM / 8;                 // weight fragments per warp, 8-token groups
    constexpr int ELEM = FP8 ? 1 : 2;
    constexpr int B_CH = S::B_ROW / 16;
    constexpr int A_ITERS = BM * 8 / NTHR, B_ITERS = BNW * B_CH / NTHR;
    static_assert(DecCfg::WARPS_M == 1 && DecCfg::WARPS_N * 32 == BNW, "one 32-row weight slice per warp");
    static_assert(BM * 8 % NTHR == 0 && BNW * B_CH % NTHR == 0, "loader split");

    unsigned char* smem = ptx::dynamic_smem();
    unsigned char* sA = smem;
    unsigned char* sB = smem + STAGES * S::A_STAGE;

    TileWork tw;
    if (!tile_work<GATE_UP>(p, BNW, tw)) return;
    const int e = tw.e, row0 = tw.row0, rows = tw.rows, n0 = tw.n0, K = tw.K;
    const int KT = K / kBK;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int g = lane >> 2, q = lane & 3;
    const int groups = (rows + 7) / 8;  // 8-token groups holding valid rows (warp-uniform)
    // down: the output rows of the lane's tokens 8·n + 2q + u (the epilogue's), loaded now so that
    // the epilogue's stores do not wait on a dependent global load each (Nsight Compute, session
    // 36: the epilogue held ~15 % of the down kernel's stall samples).
    [[maybe_unused]] int dest[NG][2];
    if constexpr (!GATE_UP) tile_row_dests(p, row0, rows, q, dest);

    // One-step loaders (bf16): exactly moe_gemm.cu's for CfgS32 (same shared layouts and swizzles).
    const __nv_bfloat16* a_src[A_ITERS];
    uint32_t a_dst[A_ITERS];
    int a_bytes[A_ITERS];
#pragma unroll
    for (int i = 0; i < A_ITERS; ++i) {
        const int c = tid + i * NTHR, m = c >> 3, ch = c & 7;
        a_src[i] = tile_a_row<GATE_UP>(p, row0, m, rows) + ch * 8;
        a_dst[i] = smem_u32(sA) + m * 128 + ((ch ^ (m & 1)) * 16);
        a_bytes[i] = m < rows ? 16 : 0;
    }
    const unsigned char* b_src[B_ITERS];
    uint32_t b_dst[B_ITERS];
    {
        const unsigned char* w0 = static_cast<const unsigned char*>(p.w0[e]);
        const unsigned char* w1 = GATE_UP ? static_cast<const unsigned char*>(p.w1[e]) : nullptr;
#pragma unroll
        for (int i = 0; i < B_ITERS; ++i) {
            const int c = tid + i * NTHR, r = c / B_CH, ch = c % B_CH;
            const unsigned char* mat = w0;
            int wrow;
            if constexpr (GATE_UP) {
                const int ws = r / 32, wi = r % 32;  // slice ws: 16 gate rows, then the same 16 up rows
                if (wi < 16) {
                    wrow = n0 + ws * 16 + wi;
                } else {
                    mat = w1;
                    wrow = n0 + ws * 16 + wi - 16;
                }
            } else {
                wrow = n0 + r;
            }
            b_src[i] = mat + (size_t(wrow) * K + ch * (16 / ELEM)) * ELEM;
            b_dst[i] = smem_u32(sB) + r * S::B_ROW + (FP8 ? ch * 16 : ((ch ^ (r & 1)) * 16));
        }
    }
    // The fp8 pair loader (load_pair_parts below). Copy i of thread tid is chunk c = tid + i·NTHR, and
    // i·NTHR leaves c's low bits alone, so a thread copies the same 16-byte piece of a line (its K
    // step `sub` and chunk `ch`) in every copy, and only the row moves: token row a_m0 + 8i, weight
    // row b_r0 + 16i. What each copy needs is therefore set here once, and a pair adds its K offset
    // and ring slot to it: the loop kept only the copies (the compiler had recomputed every address
    // from the thread index in each pair, ~130 of the K loop's 438 instructions a pair in gate_up).
    constexpr int PA_N = FP8 ? BM * 16 / NTHR : 1;           // token copies a pair (16 chunks a row)
    constexpr int PB_N = FP8 ? BNW * 8 / NTHR : 1;           // weight copies a pair (8 chunks a row)
    static_assert(!FP8 || (NTHR % 16 == 0 && PA_N * NTHR == BM * 16 && PB_N * NTHR == BNW * 8), "fp8 pair loader split");
    static_assert(!FP8 || !GATE_UP || (NTHR == 128 && BNW % 32 == 0), "gate_up rows: 16 gate rows then 16 up rows a slice");
    const int a_sub = (tid >> 3) & 1, a_m0 = tid >> 4;       // token rows a_m0 + 8i (NTHR / 16 rows a copy)
    const int b_sub = (tid >> 2) & 1, b_r0 = tid >> 3;       // weight rows b_r0 + 16i (NTHR / 8 rows a copy)
    [[maybe_unused]] const __nv_bfloat16* a_pair_src[PA_N];  // at K step a_sub of pair 0
    [[maybe_unused]] int a_pair_bytes[PA_N];                 // 16, or 0 (zero-fill) past the tile's rows
    [[maybe_unused]] uint32_t a_pair_dst = 0;                // copy i at + 8i · 128 bytes, plus the slot
    [[maybe_unused]] const unsigned char* b_pair_src[2] = {};  // copies of even / odd i, at K step b_sub of pair 0
    [[maybe_unused]] size_t b_pair_step = 0;                 // bytes from copy i to copy i + 2
    [[maybe_unused]] uint32_t b_pair_dst = 0;                // copy i at + 16i rows, plus the slot
    if constexpr (FP8) {
        const int a_ch = tid & 7, b_ch = tid & 3;
#pragma unroll
        for (int i = 0; i < PA_N; ++i) {
            const int m = a_m0 + 8 * i;
            a_pair_src[i] = tile_a_row<GATE_UP>(p, row0, m, rows) + a_ch * 8 + a_sub * kBK;
            a_pair_bytes[i] = m < rows ? 16 : 0;
        }
        // (a_m0 + 8i) & 1 = a_m0 & 1: every copy's chunk swizzle is copy 0's.
        a_pair_dst = smem_u32(sA) + a_sub * S::A_STAGE + a_m0 * 128 + ((a_ch ^ (a_m0 & 1)) * 16);
        const unsigned char* w0 = static_cast<const unsigned char*>(p.w0[e]);
        const size_t piece = size_t(b_sub) * kBK + size_t(b_ch) * 16;
        if constexpr (GATE_UP) {
            // Row b_r0 + 16i of the block is slice i / 2's gate row (even i) or up row (odd i):
            // weight row n0 + 16 (i / 2) + b_r0 of w0 or w1 (the one-step loader's layout).
            const unsigned char* w1 = static_cast<const unsigned char*>(p.w1[e]);
            b_pair_src[0] = w0 + size_t(n0 + b_r0) * K + piece;
            b_pair_src[1] = w1 + size_t(n0 + b_r0) * K + piece;
            b_pair_step = size_t(16) * K;
        } else {
            b_pair_src[0] = w0 + size_t(n0 + b_r0) * K + piece;
            b_pair_src[1] = b_pair_src[0] + size_t(16) * K;
            b_pair_step = size_t(32) * K;
        }
        b_pair_dst = smem_u32(sB) + b_sub * S::B_STAGE + b_r0 * S::B_ROW + b_ch * 16;
    }
    // parts 1: the tokens (A), 2: the weights (B), 3: both.
    auto load_stage_parts = [&](int kt, int slot, int parts) {
        if (parts & 1) {
#pragma unroll
            for (int i = 0; i < A_ITERS; ++i)
                cp_async16(a_dst[i] + slot * S::A_STAGE, a_src[i] + kt * kBK, a_bytes[i]);
        }
        if (parts & 2) {
#pragma unroll
            for (int i = 0; i < B_ITERS; ++i)
                cp_async16(b_dst[i] + slot * S::B_STAGE, b_src[i] + size_t(kt) * kBK * ELEM, 16);
        }
    };
    auto load_stage = [&](int kt, int slot) { load_stage_parts(kt, slot, 3); };
    // fp8: K steps 2j and 2j + 1 (one 128-wide scale block) copied together into slots 2·pslot and
    // 2·pslot + 1, a thread's chunks spread over both steps so that each warp instruction moves
    // whole 128-byte weight lines (4 rows × 128 bytes) instead of half lines (8 rows × 64 bytes):
    // with half lines the fp8 GEMMs moved half of bf16's bytes in the same time (H200, session 21).
    // Shared layouts and slots are the one-step loader's; step 2j + 1 past K is not copied.
    // parts as load_stage_parts'.
    [[maybe_unused]] auto load_pair_parts = [&](int j, int pslot, int parts) {
        const int KT2 = KT - 2 * j;  // steps left from 2j (>= 1)
        if ((parts & 1) && a_sub < KT2) {
            const uint32_t dst = a_pair_dst + uint32_t(2 * pslot * S::A_STAGE);
#pragma unroll
            for (int i = 0; i < PA_N; ++i)
                cp_async16(dst + i * 8 * 128, a_pair_src[i] + 2 * j * kBK, a_pair_bytes[i]);
        }
        if ((parts & 2) && b_sub < KT2) {
            const uint32_t dst = b_pair_dst + uint32_t(2 * pslot * S::B_STAGE);
            const unsigned char* src[2] = {b_pair_src[0] + 2 * j * kBK, b_pair_src[1] + 2 * j * kBK};
#pragma unroll
            for (int i = 0; i < PB_N; ++i)
                cp_async16(dst + i * 16 * S::B_ROW, src[i & 1] + size_t(i >> 1) * b_pair_step, 16);
        }
    };
    [[maybe_unused]] auto load_pair = [&](int j, int pslot) { load_pair_parts(j, pslot, 3); };

    float* s_sc = reinterpret_cast<float*>(smem + S::RING);  // fp8: [2][kMaxScaleBlocks]

    // acc[mt][ng]: rows = weight rows 32·warp + 16·mt + g (+8), columns = tokens 8·ng + 2q (+1).
    float acc[MT][NG][4];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int n = 0; n < NG; ++n)
#pragma unroll
            for (int r = 0; r < 4; ++r) acc[mt][n][r] = 0.0f;

    // Pipeline prologue: bf16 STAGES - 1 one-step groups; fp8 PAIRS - 1 two-step groups (the
    // fp8 ring's STAGES slots hold PAIRS pairs).
    constexpr int PAIRS = STAGES / 2;
    static_assert(!FP8 || (STAGES % 2 == 0 && PAIRS >= 2), "fp8: an even slot count, two pairs at least");
    const int KP = (KT + 1) / 2;  // fp8 pairs (the last may hold one step)
    // gate_up lets the down grid start now where it is launched with programmatic dependent launch
    // (MoeParams::decode_pdl): its blocks then take the SMs that gate_up's last wave leaves. down
    // issues its first weight copies (and reads its scales and row destinations) before
    // griddep_wait and gate_up's h after it; the prologue's first commit group then holds every
    // early weight copy, which only makes the first wait stricter. Without the launch attribute
    // griddep_wait returns at once.
    if constexpr (GATE_UP) ptx::griddep_launch_dependents();
    if constexpr (FP8) {
        if constexpr (!GATE_UP) {
#pragma unroll
            for (int j = 0; j < PAIRS - 1; ++j)
                if (j < KP) load_pair_parts(j, j, 2);
            load_block_scales(s_sc, p.s0[e], nullptr, n0 / 128, K, tid, NTHR);
            ptx::griddep_wait();
        }
#pragma unroll
        for (int j = 0; j < PAIRS - 1; ++j) {
            if (j < KP) load_pair_parts(j, j, GATE_UP ? 3 : 1);
            cp_async_commit();
        }
        if constexpr (GATE_UP) load_block_scales(s_sc, p.s0[e], p.s1[e], n0 / 128, K, tid, NTHR);
    } else {
        if constexpr (!GATE_UP) {
#pragma unroll
            for (int s = 0; s < STAGES - 1; ++s)
                if (s < KT) load_stage_parts(s, s, 2);
            ptx::griddep_wait();
        }
#pragma unroll
        for (int s = 0; s < STAGES - 1; ++s) {
            if (s < KT) load_stage_parts(s, s, GATE_UP ? 3 : 1);
            cp_async_commit();
        }
    }

    // One 64-wide K step from ring slot `slot` into c (fp8: the block's temporary; bf16: the
    // accumulator); the caller has waited for the slot and published it.
    // NGV: the tile's valid token groups (with_group_count), a compile-time count.
    auto step_mma = [&](int slot, float (&c)[MT][NG][4], auto ngv) {
        constexpr int NGV = decltype(ngv)::value;
        const unsigned char* a_s = sA + slot * S::A_STAGE;
        const unsigned char* b_s = sB + slot * S::B_STAGE;
        [[maybe_unused]] uint4 wraw[MT][2];  // fp8: rows g and g+8 of each fragment, the lane's 16 K bytes
        if constexpr (FP8) {
#pragma unroll
            for (int mt = 0; mt < MT; ++mt)
#pragma unroll
                for (int hr = 0; hr < 2; ++hr)
                    wraw[mt][hr] = *reinterpret_cast<const uint4*>(b_s + (warp * 32 + mt * 16 + hr * 8 + g) * S::B_ROW + q * 16);
        }
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            // Weight fragments of both k16 steps of this half: wf[mt][step][4] in mma A order.
            uint32_t wf[MT][2][4];
#pragma unroll
            for (int mt = 0; mt < MT; ++mt) {
                if constexpr (FP8) {
#pragma unroll
                    for (int st = 0; st < 2; ++st) {
                        uint32_t lo0, hi0, lo1, hi1;
                        const uint32_t w0 = h ? (st ? wraw[mt][0].w : wraw[mt][0].z) : (st ? wraw[mt][0].y : wraw[mt][0].x);
                        const uint32_t w1 = h ? (st ? wraw[mt][1].w : wraw[mt][1].z) : (st ? wraw[mt][1].y : wraw[mt][1].x);
                        e4m3x4_to_bf16x2_scaled(w0, lo0, hi0);
                        e4m3x4_to_bf16x2_scaled(w1, lo1, hi1);
                        wf[mt][st][0] = lo0;
                        wf[mt][st][1] = lo1;
                        wf[mt][st][2] = hi0;
                        wf[mt][st][3] = hi1;
                    }
                } else {
                    const int r0 = warp * 32 + mt * 16 + g, r1 = r0 + 8, ch = 2 * q + h;
                    const uint4 v0 = *reinterpret_cast<const uint4*>(b_s + r0 * S::B_ROW + ((ch ^ (r0 & 1)) * 16));
                    const uint4 v1 = *reinterpret_cast<const uint4*>(b_s + r1 * S::B_ROW + ((ch ^ (r1 & 1)) * 16));
                    wf[mt][0][0] = v0.x;
                    wf[mt][0][1] = v1.x;
                    wf[mt][0][2] = v0.y;
                    wf[mt][0][3] = v1.y;
                    wf[mt][1][0] = v0.z;
                    wf[mt][1][1] = v1.z;
                    wf[mt][1][2] = v0.w;
                    wf[mt][1][3] = v1.w;
                }
            }
#pragma unroll
            for (int n = 0; n < NG; ++n) {
                if (n >= NGV) break;  // token groups past the tile's rows (resolved at compile time)
                const int m = n * 8 + g, ch = 2 * q + h;
                const uint4 t = *reinterpret_cast<const uint4*>(a_s + m * 128 + ((ch ^ (m & 1)) * 16));
#pragma unroll
                for (int mt = 0; mt < MT; ++mt) {
                    mma_16816_bf16(c[mt][n], wf[mt][0][0], wf[mt][0][1], wf[mt][0][2], wf[mt][0][3], t.x, t.y);
                    mma_16816_bf16(c[mt][n], wf[mt][1][0], wf[mt][1][1], wf[mt][1][2], wf[mt][1][3], t.z, t.w);
                }
            }
        }
    };

    with_group_count<NG>(groups, [&](auto ngv) {
        constexpr int NGV = decltype(ngv)::value;
        if constexpr (FP8) {
            // Per 128-wide K block (two stages; K a multiple of 64, so the last block may be one):
            // a fresh zero temporary, then acc += tmp · scale_inv · 2^56 (gate and up scales apart).
            for (int j = 0; j < KP; ++j) {
                ring_advance<PAIRS>(j, KP, load_pair);  // pair j visible to all (and s_sc), pair j + PAIRS - 1 issued
                float tmp[MT][NG][4];
#pragma unroll
                for (int mt = 0; mt < MT; ++mt)
#pragma unroll
                    for (int n = 0; n < NG; ++n)
#pragma unroll
                        for (int r = 0; r < 4; ++r) tmp[mt][n][r] = 0.0f;
                const int slot = 2 * int(unsigned(j) % PAIRS);  // j >= 0
                step_mma(slot, tmp, ngv);
                if (2 * j + 1 < KT) step_mma(slot + 1, tmp, ngv);
                const float s_a = s_sc[j];  // scale_inv · 2^56 of this K block
                const float s_b = GATE_UP ? s_sc[kMaxScaleBlocks + j] : s_a;
#pragma unroll
                for (int mt = 0; mt < MT; ++mt) {
                    const float sc = (GATE_UP && mt == 1) ? s_b : s_a;
#pragma unroll
                    for (int n = 0; n < NGV; ++n)
#pragma unroll
                        for (int r = 0; r < 4; ++r) acc[mt][n][r] = fmaf(tmp[mt][n][r], sc, acc[mt][n][r]);
                }
            }
        } else {
            for (int kt = 0; kt < KT; ++kt) {
                ring_advance<STAGES>(kt, KT, load_stage);  // stage kt visible to all, stage kt + STAGES - 1 issued
                step_mma(int(unsigned(kt) % STAGES), acc, ngv);  // kt >= 0
            }
        }
    });
    cp_async_wait<0>();

    // gate_up's h carries the down GEMM's A scaling (fp8).
    swapped_tile_epilogue<GATE_UP, NG>(p, acc, row0, rows, n0, warp, g, q, dest, FP8 ? kFp8AScale : 1.0f);
}

}  // namespace

#if !defined(QS_MOE_EMULATE)
template <bool FP8, bool GATE_UP>
void launch_decode_gemm(const GemmParams& gp, dim3 grid, cudaStream_t stream, bool pdl) {
    using S = GemmShape<DecCfg, FP8>;
    allow_dynamic_smem<moe_decode_gemm_kernel<FP8, GATE_UP>>(size_t(S::SMEM));
    if (pdl) {
        QS_CUDA_CHECK(ptx::launch_kernel_pdl(moe_decode_gemm_kernel<FP8, GATE_UP>, grid, dim3(S::NTHR), size_t(S::SMEM),
                                             stream, gp));
    } else {
        moe_decode_gemm_kernel<FP8, GATE_UP><<<grid, S::NTHR, S::SMEM, stream>>>(gp);
    }
    QS_CUDA_CHECK_LAUNCH();
}

template void launch_decode_gemm<false, false>(const GemmParams&, dim3, cudaStream_t, bool);
template void launch_decode_gemm<false, true>(const GemmParams&, dim3, cudaStream_t, bool);
template void launch_decode_gemm<true, false>(const GemmParams&, dim3, cudaStream_t, bool);
template void launch_decode_gemm<true, true>(const GemmParams&, dim3, cudaStream_t, bool);
#endif

}  // namespace qs::cuda::moe

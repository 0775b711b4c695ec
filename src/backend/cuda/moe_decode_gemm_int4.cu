// MoE grouped GEMMs with INT4 W4A16 experts on tensor cores (issue 18 item 4; MoeParams::
// int4_grouped = 1; bench/kernels/NOTES.md "INT4 MoE grouped GEMM"). The tile list (sort with
// 32-row tiles), token loader and operand roles are moe_decode_gemm.cu's (weights the m16
// operand, tokens the n8 operand in 8-token groups, groups past the tile's rows skipped); what
// differs is the weight operand: the device INT4 layout (backend/int4_layout.h: u32 codes
// [rows, K/8] of q's two's complement nibbles, bf16 scales [rows, K/group]), a quarter of the BF16 copy's bytes.
//  - Shared weight rows are 32 bytes per 64-wide K stage (2 cp.async chunks), 128 rows: 4 KiB a
//    stage, the same as the token tile; 8 stages in flight (64 KiB per block).
//  - Unpack: lane (g, q) needs K 16q..16q+15 of its rows (moe_gemm.cu's K permutation), i.e.
//    code words 2q and 2q+1 of the stage row: one 8-byte shared load per row. A word's natural
//    bf16 pairs are (q_s, q_{s+4}) (int4_unpack.cuh bf16x2_pair: shift, lop3, one bf16x2 fma),
//    so the MMA's K positions are permuted once more inside each word, and the token operand is
//    permuted to match: (x0, x4), (x1, x5) for k16 step 0, (x2, x6), (x3, x7) for step 1 (two
//    shifts and a lop3 per register, once per token group, shared by both weight fragments).
//  - Scales: the MMA sums q·x over one scale group (group a multiple of 64: whole stages) into a
//    fresh zero temporary, then acc += tmp · scale[row][group] in fp32, as the fp8 path's block
//    promotion; the products q·x are exact, so the result differs from the CPU reference
//    ((q·s)·x summed in fp32) only in summation order.
//  - NVFP4 (GemmParams::qglobal; E2M1 codes, an E4M3 block scale byte per 16 K values): lane (g, q)'s 16
//    K values of a row in a stage are exactly one block (block 4·kt + q), so each code pair is
//    multiplied by its block scale before the MMA (w4::nvfp4_operand: E2M1 × E4M3 is exact in bf16;
//    the scale folded with the E2M1 bias, so the operand is the value · 2^−8), one accumulator runs
//    over all of K, and the matrix's global (times 2^8) multiplies the sum once. The
//    block scales travel with the codes: 4 bytes per row and stage by cp.async into a ring beside
//    the weights' (Int4GemmShape::S_STAGE), read from shared memory like the codes.
// h = silu(g)·u is rounded to bf16 as on the BF16 path; the down GEMM writes eout rows for
// moe_combine.cu, fp32 or (MoeParams::decode_eout_bf16) rounded to bf16. With MoeParams::decode_pdl
// the down GEMM is launched with programmatic dependent launch as moe_decode_gemm.cu's: its first
// weight stages are copied before griddepcontrol.wait, the h stages after. Also compiles as host
// C++ for the CPU emulation (bench/kernels/moe_emu.cpp --int4-dec).
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/device_limits.h"
#include "backend/cuda/int4_unpack.cuh"
#include "backend/cuda/moe_common.cuh"
#include "backend/cuda/moe_group_count.cuh"
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

// Token bf16 pair words (lo, hi) → the pair (lo.low, hi.low) and (lo.high, hi.high): one byte
// permute each (an and + shift + or before: the kernel's hottest instructions under Nsight Compute).
__device__ __forceinline__ uint32_t lows(uint32_t a, uint32_t b) { return ptx::prmt2(a, b, 0x5410u); }
__device__ __forceinline__ uint32_t highs(uint32_t a, uint32_t b) { return ptx::prmt2(a, b, 0x7632u); }

template <bool GATE_UP, w4::Code4 F>
__global__ __launch_bounds__(Int4GemmShape::NTHR) void moe_int4_gemm_kernel(GemmParams p) {
    using S = Int4GemmShape;
    constexpr bool NV = F == w4::Code4::kNvfp4;
    constexpr int BM = S::BM, BNW = S::BNW, NTHR = S::NTHR, STAGES = S::STAGES;
    constexpr int MT = 2, NG = BM / 8;  // weight fragments per warp, 8-token groups
    constexpr int A_ITERS = BM * 8 / NTHR, B_ITERS = BNW * 2 / NTHR;
    static_assert(BNW == (NTHR / 32) * 32, "one 32-row weight slice per warp");
    static_assert(BM * 8 % NTHR == 0 && BNW * 2 % NTHR == 0, "loader split");

    unsigned char* smem = ptx::dynamic_smem();
    unsigned char* sA = smem;
    unsigned char* sB = smem + STAGES * S::A_STAGE;
    unsigned char* sS = sB + STAGES * S::B_STAGE;  // NVFP4's block scales

    TileWork tw;
    if (!tile_work<GATE_UP>(p, BNW, tw)) return;
    const int e = tw.e, row0 = tw.row0, rows = tw.rows, n0 = tw.n0, K = tw.K;
    const int KT = K / kBK, words = K / 8, ngroups = K / p.qgroup, spg = p.qgroup / kBK;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int g = lane >> 2, q = lane & 3;
    const int groups = (rows + 7) / 8;  // 8-token groups holding valid rows (warp-uniform)
    // NVFP4: the globals of the warp's two fragments (gate_up: gate, up; down: down twice), loaded
    // now, used after the K loop.
    [[maybe_unused]] float glob[MT] = {1.0f, 1.0f};
    if constexpr (NV) {  // the operands carry 2^−8 (w4::nvfp4_operand)
        glob[0] = p.qglobal[3 * e + (GATE_UP ? 0 : 2)] * w4::kNvfp4FoldedUnscale;
        glob[1] = p.qglobal[3 * e + (GATE_UP ? 1 : 2)] * w4::kNvfp4FoldedUnscale;
    }
    // down: the output rows of the lane's tokens, loaded before the K loop (tile_row_dests).
    [[maybe_unused]] int dest[NG][2];
    if constexpr (!GATE_UP) tile_row_dests(p, row0, rows, q, dest);

    // Token loader: moe_decode_gemm.cu's (128-byte rows, chunk c of row m at c ^ (m & 1)).
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
    // Weight row r of the block: gate_up slice ws = r / 32 is 16 gate rows then the same 16 up
    // rows (moe_decode_gemm.cu's layout); down: row n0 + r. Shared rows of 32 bytes, plain.
    auto weight_row = [&](int r, bool& second) {
        if constexpr (GATE_UP) {
            const int ws = r / 32, wi = r % 32;
            second = wi >= 16;
            return n0 + ws * 16 + (wi & 15);
        } else {
            second = false;
            return n0 + r;
        }
    };
    const uint32_t* b_src[B_ITERS];
    uint32_t b_dst[B_ITERS];
#pragma unroll
    for (int i = 0; i < B_ITERS; ++i) {
        const int c = tid + i * NTHR, r = c >> 1, ch = c & 1;
        bool second;
        const int wrow = weight_row(r, second);
        const uint32_t* mat = second ? p.q1[e] : p.q0[e];
        b_src[i] = mat + size_t(wrow) * words + ch * 4;
        b_dst[i] = smem_u32(sB) + r * S::B_ROW + ch * 16;
    }
    // NVFP4: thread tid copies block-scale row tid's 4 bytes of a stage (scales [rows, K/16] E4M3).
    [[maybe_unused]] const uint8_t* s_src = nullptr;
    [[maybe_unused]] uint32_t s_dst = 0;
    if constexpr (NV) {
        static_assert(BNW == NTHR, "one scale row per thread");
        bool second;
        const int wrow = weight_row(tid, second);
        s_src = static_cast<const uint8_t*>(second ? p.qs1[e] : p.qs0[e]) + size_t(wrow) * (K / 16);
        s_dst = smem_u32(sS) + tid * S::S_ROW;
    }
    // parts 1: the tokens (A), 2: the weights (B) and NVFP4's scales, 3: both.
    auto load_stage_parts = [&](int kt, int slot, int parts) {
        if (parts & 1) {
#pragma unroll
            for (int i = 0; i < A_ITERS; ++i)
                cp_async16(a_dst[i] + slot * S::A_STAGE, a_src[i] + kt * kBK, a_bytes[i]);
        }
        if (parts & 2) {
#pragma unroll
            for (int i = 0; i < B_ITERS; ++i)
                cp_async16(b_dst[i] + slot * S::B_STAGE, b_src[i] + kt * (kBK / 8), 16);
            if constexpr (NV) ptx::cp_async4(s_dst + slot * S::S_STAGE, s_src + kt * (kBK / 16));
        }
    };
    auto load_stage = [&](int kt, int slot) { load_stage_parts(kt, slot, 3); };

    // INT4: the lane's four accumulator rows' scale rows: fragment mt, half hr → shared row 32·warp +
    // 16·mt + 8·hr + g.
    [[maybe_unused]] const uint16_t* srow[MT][2];
    if constexpr (!NV) {
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
            for (int hr = 0; hr < 2; ++hr) {
                bool second;
                const int wrow = weight_row(warp * 32 + mt * 16 + hr * 8 + g, second);
                srow[mt][hr] = static_cast<const uint16_t*>(second ? p.qs1[e] : p.qs0[e]) + size_t(wrow) * ngroups;
            }
    }

    // acc[mt][ng]: rows = weight rows 32·warp + 16·mt + g (+8), columns = tokens 8·ng + 2q (+1).
    float acc[MT][NG][4];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int n = 0; n < NG; ++n)
#pragma unroll
            for (int r = 0; r < 4; ++r) acc[mt][n][r] = 0.0f;

    // gate_up lets a down grid launched with programmatic dependent launch (MoeParams::decode_pdl)
    // start now; down issues its first weight copies before griddep_wait and gate_up's h after it
    // (the first commit group then also holds every early weight copy: a stricter first wait only).
    // Without the launch attribute griddep_wait returns at once.
    if constexpr (GATE_UP) ptx::griddep_launch_dependents();
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

    // NGV: the tile's valid token groups (with_group_count), a compile-time count.
    auto stage_mma = [&](int kt, float (&c)[MT][NG][4], auto ngv) {
        constexpr int NGV = decltype(ngv)::value;
        ring_advance<STAGES>(kt, KT, load_stage);  // stage kt visible to all, stage kt + STAGES - 1 issued
        const int slot = int(unsigned(kt) % STAGES);  // kt >= 0
        const unsigned char* a_s = sA + slot * S::A_STAGE;
        const unsigned char* b_s = sB + slot * S::B_STAGE;
        uint2 wraw[MT][2];  // rows g and g+8 of each fragment: code words 2q (K 16q..+7) and 2q+1
        [[maybe_unused]] uint32_t s2[MT][2];  // NVFP4: those rows' block-q scales folded, bf16x2 (s, s)
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
            for (int hr = 0; hr < 2; ++hr) {
                const int r = warp * 32 + mt * 16 + hr * 8 + g;
                wraw[mt][hr] = *reinterpret_cast<const uint2*>(b_s + r * S::B_ROW + q * 8);
                if constexpr (NV) {
                    const uint32_t sv = sS[slot * S::S_STAGE + r * S::S_ROW + q];
                    s2[mt][hr] = w4::nvfp4_scale_folded(sv | (sv << 8));
                }
            }
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            // wf[mt][step][4] in mma A order: step 0 pairs (q0, q4), (q1, q5); step 1 (q2, q6), (q3, q7).
            uint32_t wf[MT][2][4];
#pragma unroll
            for (int mt = 0; mt < MT; ++mt) {
                const uint32_t w0 = h ? wraw[mt][0].y : wraw[mt][0].x;
                const uint32_t w1 = h ? wraw[mt][1].y : wraw[mt][1].x;
#pragma unroll
                for (int st = 0; st < 2; ++st) {
                    if constexpr (NV) {  // registers 0, 2 from row g, 1, 3 from row g + 8
                        wf[mt][st][0] = w4::nvfp4_operand(w0, 2 * st, s2[mt][0]);
                        wf[mt][st][1] = w4::nvfp4_operand(w1, 2 * st, s2[mt][1]);
                        wf[mt][st][2] = w4::nvfp4_operand(w0, 2 * st + 1, s2[mt][0]);
                        wf[mt][st][3] = w4::nvfp4_operand(w1, 2 * st + 1, s2[mt][1]);
                    } else {
                        wf[mt][st][0] = w4::bf16x2_pair<F>(w0, 2 * st);
                        wf[mt][st][1] = w4::bf16x2_pair<F>(w1, 2 * st);
                        wf[mt][st][2] = w4::bf16x2_pair<F>(w0, 2 * st + 1);
                        wf[mt][st][3] = w4::bf16x2_pair<F>(w1, 2 * st + 1);
                    }
                }
            }
#pragma unroll
            for (int n = 0; n < NG; ++n) {
                if (n >= NGV) break;  // token groups past the tile's rows (resolved at compile time)
                const int m = n * 8 + g, ch = 2 * q + h;
                const uint4 t = *reinterpret_cast<const uint4*>(a_s + m * 128 + ((ch ^ (m & 1)) * 16));
                // t = (x0, x1), (x2, x3), (x4, x5), (x6, x7) → the weight pairs' order.
                const uint32_t b00 = lows(t.x, t.z), b01 = highs(t.x, t.z);
                const uint32_t b10 = lows(t.y, t.w), b11 = highs(t.y, t.w);
#pragma unroll
                for (int mt = 0; mt < MT; ++mt) {
                    mma_16816_bf16(c[mt][n], wf[mt][0][0], wf[mt][0][1], wf[mt][0][2], wf[mt][0][3], b00, b01);
                    mma_16816_bf16(c[mt][n], wf[mt][1][0], wf[mt][1][1], wf[mt][1][2], wf[mt][1][3], b10, b11);
                }
            }
        }
    };

    with_group_count<NG>(groups, [&](auto ngv) {
        constexpr int NGV = decltype(ngv)::value;
        if constexpr (NV) {
            for (int kt = 0; kt < KT; ++kt) stage_mma(kt, acc, ngv);
#pragma unroll
            for (int mt = 0; mt < MT; ++mt)
#pragma unroll
                for (int n = 0; n < NGV; ++n)
#pragma unroll
                    for (int r = 0; r < 4; ++r) acc[mt][n][r] *= glob[mt];
        } else {
            for (int kg = 0; kg < ngroups; ++kg) {
                float sc[MT][2];  // issued before the group's MMAs, used after them
#pragma unroll
                for (int mt = 0; mt < MT; ++mt)
#pragma unroll
                    for (int hr = 0; hr < 2; ++hr) sc[mt][hr] = w4::scale_f32<F>(srow[mt][hr][kg]);
                float tmp[MT][NG][4];
#pragma unroll
                for (int mt = 0; mt < MT; ++mt)
#pragma unroll
                    for (int n = 0; n < NG; ++n)
#pragma unroll
                        for (int r = 0; r < 4; ++r) tmp[mt][n][r] = 0.0f;
                for (int s = 0; s < spg; ++s) stage_mma(kg * spg + s, tmp, ngv);
#pragma unroll
                for (int mt = 0; mt < MT; ++mt)
#pragma unroll
                    for (int n = 0; n < NGV; ++n)
#pragma unroll
                        for (int r = 0; r < 4; ++r) acc[mt][n][r] = fmaf(tmp[mt][n][r], sc[mt][r >> 1], acc[mt][n][r]);
            }
        }
    });
    cp_async_wait<0>();

    swapped_tile_epilogue<GATE_UP, NG>(p, acc, row0, rows, n0, warp, g, q, dest, 1.0f);
}

}  // namespace

#if !defined(QS_MOE_EMULATE)
template <bool GATE_UP, w4::Code4 F>
void launch_int4_gemm_format(const GemmParams& gp, dim3 grid, cudaStream_t stream, bool pdl) {
    using S = Int4GemmShape;
    constexpr int smem = F == w4::Code4::kNvfp4 ? S::SMEM_NVFP4 : S::SMEM;
    allow_dynamic_smem<moe_int4_gemm_kernel<GATE_UP, F>>(size_t(smem));
    if (pdl) {
        QS_CUDA_CHECK(ptx::launch_kernel_pdl(moe_int4_gemm_kernel<GATE_UP, F>, grid, dim3(S::NTHR), size_t(smem), stream, gp));
    } else {
        moe_int4_gemm_kernel<GATE_UP, F><<<grid, S::NTHR, smem, stream>>>(gp);
    }
    QS_CUDA_CHECK_LAUNCH();
}

template <bool GATE_UP>
void launch_int4_gemm(const GemmParams& gp, dim3 grid, cudaStream_t stream, bool pdl) {
    if (gp.qglobal != nullptr) launch_int4_gemm_format<GATE_UP, w4::Code4::kNvfp4>(gp, grid, stream, pdl);
    else launch_int4_gemm_format<GATE_UP, w4::Code4::kInt4>(gp, grid, stream, pdl);
}

template void launch_int4_gemm<false>(const GemmParams&, dim3, cudaStream_t, bool);
template void launch_int4_gemm<true>(const GemmParams&, dim3, cudaStream_t, bool);
#endif

}  // namespace qs::cuda::moe

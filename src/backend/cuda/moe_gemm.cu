// MoE stages 3-4 (see moe_kernels.cu for the whole pipeline): the grouped GEMMs over the sorted
// tile list, gate_up with SiLU·mul fused (-> h, bf16) and down (-> fp32 rows per (token, expert)),
// bf16 or fp8 block-scaled weights, mma.sync m16n8k16 with a cp.async pipeline. CPU reference:
// src/backend/cpu/cpu_moe.cpp.
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/device_limits.h"
#include "backend/cuda/moe_common.cuh"
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


// ---------------------------------------------------------------------------------------------
// 3./4. Grouped GEMMs
// ---------------------------------------------------------------------------------------------

template <class Cfg, bool FP8, bool GATE_UP>
__global__ __launch_bounds__(GemmShape<Cfg, FP8>::NTHR) void moe_gemm_kernel(GemmParams p) {
    using S = GemmShape<Cfg, FP8>;
    constexpr int BM = Cfg::BM, BNW = Cfg::BNW, NTHR = S::NTHR, STAGES = S::STAGES;
    constexpr int WM = BM / Cfg::WARPS_M, WNW = BNW / Cfg::WARPS_N;
    constexpr int MT = WM / 16, NT = WNW / 8;
    constexpr int ELEM = FP8 ? 1 : 2;                  // weight bytes per element
    constexpr int B_CH = S::B_ROW / 16;                // 16-byte chunks per B row per stage
    constexpr int A_ITERS = BM * 8 / NTHR, B_ITERS = BNW * B_CH / NTHR;
    static_assert(WM % 16 == 0 && WNW % 16 == 0 && NT % 2 == 0, "warp tile");
    static_assert(BM * 8 % NTHR == 0 && BNW * B_CH % NTHR == 0, "loader split");
    static_assert(!FP8 || (128 % (GATE_UP ? BNW / 2 : BNW) == 0), "fp8 tile inside one scale block");

    unsigned char* smem = ptx::dynamic_smem();
    unsigned char* sA = smem;
    unsigned char* sB = smem + STAGES * S::A_STAGE;

    TileWork tw;
    if (!tile_work<GATE_UP>(p, BNW, tw)) return;
    const int e = tw.e, row0 = tw.row0, rows = tw.rows, n0 = tw.n0, K = tw.K;
    const int KT = K / kBK;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int warp_m = warp / Cfg::WARPS_N, warp_n = warp % Cfg::WARPS_N;
    const int g = lane >> 2, q = lane & 3;

    // Per-thread loader sources (fixed across K stages) and shared destinations.
    const __nv_bfloat16* a_src[A_ITERS];
    uint32_t a_dst[A_ITERS];
    int a_bytes[A_ITERS];
#pragma unroll
    for (int i = 0; i < A_ITERS; ++i) {
        const int c = tid + i * NTHR, m = c >> 3, ch = c & 7;
        a_src[i] = tile_a_row<GATE_UP>(p, row0, m, rows) + ch * 8;
        a_dst[i] = smem_u32(sA) + m * 128 + ((ch ^ (m & 1)) * 16);
        a_bytes[i] = m < rows ? 16 : 0;  // rows past the tile are zero-filled
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
                // Warp slot ws holds gate rows then up rows of the same WNW/2 columns.
                const int ws = r / WNW, wi = r % WNW, half = WNW / 2;
                if (wi < half) {
                    wrow = n0 + ws * half + wi;
                } else {
                    mat = w1;
                    wrow = n0 + ws * half + wi - half;
                }
            } else {
                wrow = n0 + r;
            }
            b_src[i] = mat + (size_t(wrow) * K + ch * (16 / ELEM)) * ELEM;
            b_dst[i] = smem_u32(sB) + r * S::B_ROW + (FP8 ? ch * 16 : ((ch ^ (r & 1)) * 16));
        }
    }
    auto load_stage = [&](int kt, int slot) {
#pragma unroll
        for (int i = 0; i < A_ITERS; ++i)
            cp_async16(a_dst[i] + slot * S::A_STAGE, a_src[i] + kt * kBK, a_bytes[i]);
#pragma unroll
        for (int i = 0; i < B_ITERS; ++i)
            cp_async16(b_dst[i] + slot * S::B_STAGE, b_src[i] + size_t(kt) * kBK * ELEM, 16);
    };

    float* s_sc = reinterpret_cast<float*>(smem + S::RING);  // fp8: [2][kMaxScaleBlocks]

    float acc[MT][NT][4];
    float tmp[FP8 ? MT : 1][FP8 ? NT : 1][4];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int j = 0; j < NT; ++j)
#pragma unroll
            for (int r = 0; r < 4; ++r) acc[mt][j][r] = 0.0f;
    if constexpr (FP8) {
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
            for (int j = 0; j < NT; ++j)
#pragma unroll
                for (int r = 0; r < 4; ++r) tmp[mt][j][r] = 0.0f;
    }

#pragma unroll
    for (int s = 0; s < STAGES - 1; ++s) {
        if (s < KT) load_stage(s, s);
        cp_async_commit();
    }
    if constexpr (FP8) load_block_scales(s_sc, p.s0[e], GATE_UP ? p.s1[e] : nullptr, n0 / 128, K, tid, NTHR);

    for (int kt = 0; kt < KT; ++kt) {
        ring_advance<STAGES>(kt, KT, load_stage);  // stage kt visible to all, stage kt + STAGES - 1 issued
        const bool promote = FP8 && ((kt & 1) || kt == KT - 1);

        const int slot = kt % STAGES;
        const unsigned char* a_s = sA + slot * S::A_STAGE;
        const unsigned char* b_s = sB + slot * S::B_STAGE;
        uint4 braw[FP8 ? NT : 1];
        if constexpr (FP8) {
#pragma unroll
            for (int j = 0; j < NT; ++j)
                braw[j] = *reinterpret_cast<const uint4*>(b_s + (warp_n * WNW + j * 8 + g) * S::B_ROW + q * 16);
        }
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            uint32_t bf[NT][4];
#pragma unroll
            for (int j = 0; j < NT; ++j) {
                if constexpr (FP8) {
                    e4m3x4_to_bf16x2_scaled(h ? braw[j].z : braw[j].x, bf[j][0], bf[j][1]);
                    e4m3x4_to_bf16x2_scaled(h ? braw[j].w : braw[j].y, bf[j][2], bf[j][3]);
                } else {
                    const int r = warp_n * WNW + j * 8 + g, ch = 2 * q + h;
                    const uint4 v = *reinterpret_cast<const uint4*>(b_s + r * S::B_ROW + ((ch ^ (r & 1)) * 16));
                    bf[j][0] = v.x;
                    bf[j][1] = v.y;
                    bf[j][2] = v.z;
                    bf[j][3] = v.w;
                }
            }
#pragma unroll
            for (int mt = 0; mt < MT; ++mt) {
                const int r = warp_m * WM + mt * 16 + g, ch = 2 * q + h;
                const int sw = (ch ^ (r & 1)) * 16;  // (r + 8) & 1 == r & 1
                const uint4 x = *reinterpret_cast<const uint4*>(a_s + r * 128 + sw);
                const uint4 y = *reinterpret_cast<const uint4*>(a_s + (r + 8) * 128 + sw);
#pragma unroll
                for (int j = 0; j < NT; ++j) {
                    if constexpr (FP8) {
                        mma_16816_bf16(tmp[mt][j], x.x, y.x, x.y, y.y, bf[j][0], bf[j][1]);
                        mma_16816_bf16(tmp[mt][j], x.z, y.z, x.w, y.w, bf[j][2], bf[j][3]);
                    } else {
                        mma_16816_bf16(acc[mt][j], x.x, y.x, x.y, y.y, bf[j][0], bf[j][1]);
                        mma_16816_bf16(acc[mt][j], x.z, y.z, x.w, y.w, bf[j][2], bf[j][3]);
                    }
                }
            }
        }
        if constexpr (FP8) {
            if (promote) {
                const float s_a = s_sc[kt >> 1];  // scale_inv · 2^56 of this K block
                const float s_b = GATE_UP ? s_sc[kMaxScaleBlocks + (kt >> 1)] : s_a;
#pragma unroll
                for (int mt = 0; mt < MT; ++mt)
#pragma unroll
                    for (int j = 0; j < NT; ++j) {
                        const float sc = (GATE_UP && j >= NT / 2) ? s_b : s_a;
#pragma unroll
                        for (int r = 0; r < 4; ++r) {
                            acc[mt][j][r] = fmaf(tmp[mt][j][r], sc, acc[mt][j][r]);
                            tmp[mt][j][r] = 0.0f;
                        }
                    }
            }
        }
    }
    cp_async_wait<0>();  // nothing real is pending (tail groups are empty); keeps the exit clean

    // Epilogue. Accumulator (mt, j): rows warp_m·WM + mt·16 + g (+8), columns j·8 + 2q (+1).
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
        for (int rr = 0; rr < 2; ++rr) {
            const int m = warp_m * WM + mt * 16 + g + rr * 8;
            if (m >= rows) continue;
            if constexpr (GATE_UP) {
                __nv_bfloat16* out = p.h_out + size_t(row0 + m) * p.ldh + n0 + warp_n * (WNW / 2) + 2 * q;
#pragma unroll
                for (int j = 0; j < NT / 2; ++j) {
                    const float g0 = acc[mt][j][2 * rr], g1 = acc[mt][j][2 * rr + 1];
                    const float u0 = acc[mt][j + NT / 2][2 * rr], u1 = acc[mt][j + NT / 2][2 * rr + 1];
                    constexpr float hs = FP8 ? kFp8AScale : 1.0f;  // the down GEMM's A scaling
                    const float h0 = g0 / (1.0f + expf(-g0)) * u0 * hs;
                    const float h1 = g1 / (1.0f + expf(-g1)) * u1 * hs;
                    *reinterpret_cast<uint32_t*>(out + j * 8) = pack_bf16x2(h0, h1);
                }
            } else {
                const int dest = p.row_dest[row0 + m];
                float* out = p.y_out + size_t(dest) * p.H + n0 + warp_n * WNW + 2 * q;
#pragma unroll
                for (int j = 0; j < NT; ++j)
                    *reinterpret_cast<float2*>(out + j * 8) = make_float2(acc[mt][j][2 * rr], acc[mt][j][2 * rr + 1]);
            }
        }
    }
}

}  // namespace

#if !defined(QS_MOE_EMULATE)
template <class Cfg, bool FP8, bool GATE_UP>
void launch_gemm(const GemmParams& gp, dim3 grid, cudaStream_t stream) {
    using S = GemmShape<Cfg, FP8>;
    allow_dynamic_smem<moe_gemm_kernel<Cfg, FP8, GATE_UP>>(size_t(S::SMEM));
    moe_gemm_kernel<Cfg, FP8, GATE_UP><<<grid, S::NTHR, S::SMEM, stream>>>(gp);
    QS_CUDA_CHECK_LAUNCH();
}

template void launch_gemm<CfgS16, false, false>(const GemmParams&, dim3, cudaStream_t);
template void launch_gemm<CfgS16, false, true>(const GemmParams&, dim3, cudaStream_t);
template void launch_gemm<CfgS16, true, false>(const GemmParams&, dim3, cudaStream_t);
template void launch_gemm<CfgS16, true, true>(const GemmParams&, dim3, cudaStream_t);
template void launch_gemm<CfgS32, false, false>(const GemmParams&, dim3, cudaStream_t);
template void launch_gemm<CfgS32, false, true>(const GemmParams&, dim3, cudaStream_t);
template void launch_gemm<CfgS32, true, false>(const GemmParams&, dim3, cudaStream_t);
template void launch_gemm<CfgS32, true, true>(const GemmParams&, dim3, cudaStream_t);
template void launch_gemm<CfgL128, false, false>(const GemmParams&, dim3, cudaStream_t);
template void launch_gemm<CfgL128, false, true>(const GemmParams&, dim3, cudaStream_t);
template void launch_gemm<CfgL128, true, false>(const GemmParams&, dim3, cudaStream_t);
template void launch_gemm<CfgL128, true, true>(const GemmParams&, dim3, cudaStream_t);
template void launch_gemm<CfgS16N, false, false>(const GemmParams&, dim3, cudaStream_t);
template void launch_gemm<CfgS16N, false, true>(const GemmParams&, dim3, cudaStream_t);
template void launch_gemm<CfgS16N, true, false>(const GemmParams&, dim3, cudaStream_t);
template void launch_gemm<CfgS16N, true, true>(const GemmParams&, dim3, cudaStream_t);
#endif

}  // namespace qs::cuda::moe

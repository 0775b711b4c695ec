// The INT4 (and NVFP4) small-T MoE gate_up on tensor cores (SmallPlan::gate_up_mma; MoeParams::
// small_int4_gate_up_version 2). Version 1 (moe_small_int4.cu's gate_up_kernel) unpacks every code to
// fp32 and runs 8 FMAs per 8-code word and token: ~15 µs a layer for a one-token step on an H100
// (session 39's timeline) against ~11 for FP8's kernel at twice the bytes. Here, as in the dense
// linears' version 3 (int4_linear_mma.cu, whose header describes the operand mapping), a warp
// multiplies 16 weight rows by the slot's tokens with mma.sync m16n8k16 on exact bf16 pairs of the
// codes; every product is version 1's, the fp32 sums run in another order.
//  - The plan's grid is version 1's: (max(I, I_shared) / 16, max slots), a block per 16 intermediate
//    rows n0 .. n0 + 15 of one slot's expert, gate and up both. Warp w takes the 128-column groups
//    kb = w, w + 8, ... of H. Lane (g = lane / 4, q = lane % 4) loads, for each of its groups, 16 bytes
//    (the 32 codes of columns 128 kb + 32 q ..) of gate rows n0 + g and n0 + g + 8 and of the same up
//    rows, and the four rows' group scales — all before x is staged, one DRAM round trip a block.
//  - x of the slot's tokens (at most 8: the MMA's N) is staged once per block rounded to bf16, each
//    8-column word in the pairs' order (0, 4, 1, 5, 2, 6, 3, 7); B column n is the slot's token n
//    (columns past the slot's count are zeros and stored nowhere).
//  - Per group the MMAs start from zero, then acc += D · the row's scale (the group, a multiple of
//    128, covers an MMA's 128 columns); the 8 warps' sums are added in warp order through shared
//    memory, then h = silu(gate) · up rounded to bf16 as version 1 stores it.
// NVFP4 experts (group 16) as int4_linear_mma.cu takes them: each 16-column block's scale folded into
// its code pairs before the MMA (w4::nvfp4_operand, exact), one accumulator over all groups, gate and up
// multiplied by their matrices' globals before the SiLU. INT4 groups must be a multiple of 128; H a
// multiple of 128 up to 4,096. Also compiles as host C++ for the CPU emulation (bench/kernels/
// moe_emu.cpp --int4, --nvfp4).
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/device_limits.h"
#include "backend/cuda/int4_unpack.cuh"
#include "backend/cuda/moe_common.cuh"
#if !defined(QS_MOE_EMULATE)
#include "backend/cuda/ptx_helpers.cuh"
#endif
#include "backend/cuda/moe_small_math.cuh"

namespace qs::cuda::moe {
namespace small_int4_mma {

using small_math::ld;
using small_math::word;

constexpr int kWarps = kSmallThreads / 32;
constexpr int kXPad = 1;  // 16-byte words after each staged x row (spreads the rows' banks)
static_assert(kSmallRows == 16, "a block's intermediate rows are one MMA's M");
static_assert(kMoeSmallTMax <= 8, "a slot's tokens are one MMA's N");

// Two floats rounded to bf16 (round to nearest even) as one bf16x2 register, a in the low half.
__device__ __forceinline__ uint32_t bf16x2_of(float a, float b) {
    const uint32_t lo = __bfloat16_as_ushort(__float2bfloat16_rn(a)), hi = __bfloat16_as_ushort(__float2bfloat16_rn(b));
    return lo | (hi << 16);
}

// KS = column groups a warp takes at most (ceil(H / 1,024)).
template <w4::Code4 F, int KS, bool V2>
__global__ __launch_bounds__(kSmallThreads, 2) void gate_up_mma_kernel(SmallParams p) {
    __shared__ float partial[kWarps][2][kSmallRows][8];  // [warp][gate, up][row][token]
    __shared__ int s_dest[8];                            // h row of each of the slot's tokens
    const int slot = blockIdx.y;
    int e = p.E, nt = p.T;
    if constexpr (V2) {
        if (slot != 0) ptx::griddep_wait();  // the routed slots come from the router's grid
        ptx::griddep_launch_dependents();
    }
    if (slot != 0) {
        if (slot >= *p.n_slots) return;
        e = p.slot_expert[slot];
        nt = p.slot_count[slot];
    }
    const int Ie = e == p.E ? p.I_shared : p.I;
    const int n0 = blockIdx.x * kSmallRows;
    if (n0 >= Ie) return;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, q = lane & 3;
    const int H = p.H, words = H / 8, blocks_k = H / 128, sgroups = H / p.qgroup, xrow = words + kXPad;

    // 1. The lane's weights: [i][0..3] = gate row n0 + g, gate n0 + g + 8, up n0 + g, up n0 + g + 8.
    const uint32_t* mat[4] = {p.gate_q[e], p.gate_q[e], p.up_q[e], p.up_q[e]};
    using ST = w4::scale_t<F>;
    const ST* smat[4] = {static_cast<const ST*>(p.gate_qs[e]), static_cast<const ST*>(p.gate_qs[e]),
                         static_cast<const ST*>(p.up_qs[e]), static_cast<const ST*>(p.up_qs[e])};
    uint4 w[KS][4];
    uint32_t sc[KS][4];  // INT4: the group's bf16 scale; NVFP4: the chunk's two block scale bytes
#pragma unroll
    for (int i = 0; i < KS; ++i) {
        const int kb = warp + kWarps * i;
#pragma unroll
        for (int m = 0; m < 4; ++m) {
            w[i][m] = make_uint4(0, 0, 0, 0);
            sc[i][m] = 0;
            if (kb < blocks_k) {
                const int r = n0 + g + 8 * (m & 1);
                w[i][m] = ld(reinterpret_cast<const uint4*>(mat[m] + size_t(r) * words) + kb * 4 + q);
                if constexpr (F == w4::Code4::kNvfp4)  // blocks of columns 128 kb + 32 q .. + 15, + 16 .. + 31
                    sc[i][m] = ld(reinterpret_cast<const uint16_t*>(smat[m] + size_t(r) * sgroups + kb * 8 + 2 * q));
                else
                    sc[i][m] = ld(smat[m] + size_t(r) * sgroups + kb * 128 / p.qgroup);
            }
        }
    }

    // 2. x of the slot's tokens → bf16, each 8-column word stored as columns (0, 4, 1, 5, 2, 6, 3, 7).
    uint4* xs = reinterpret_cast<uint4*>(ptx::dynamic_smem());  // [nt][xrow] words
    if (tid < nt) s_dest[tid] = slot == 0 ? p.T * p.k + tid : p.slot_dest[slot * p.T + tid];
    __syncthreads();
    for (int i = tid; i < nt * words; i += kSmallThreads) {
        const int n = i / words, wd = i % words;
        const int dest = s_dest[n], token = dest < p.T * p.k ? dest / p.k : dest - p.T * p.k;
        const float4* src = reinterpret_cast<const float4*>(p.x + size_t(token) * H + 8 * wd);
        const float4 lo = src[0], hi = src[1];
        xs[n * xrow + wd] = make_uint4(bf16x2_of(lo.x, hi.x), bf16x2_of(lo.y, hi.y), bf16x2_of(lo.z, hi.z),
                                       bf16x2_of(lo.w, hi.w));
    }
    __syncthreads();

    // 3. The warp's groups on tensor cores. D: rows g / g + 8, tokens 2q / 2q + 1.
    float acc[2][4] = {{0.0f, 0.0f, 0.0f, 0.0f}, {0.0f, 0.0f, 0.0f, 0.0f}};
#pragma unroll
    for (int i = 0; i < KS; ++i) {
        const int kb = warp + kWarps * i;
        if (kb >= blocks_k) break;
        float d[2][4] = {{0.0f, 0.0f, 0.0f, 0.0f}, {0.0f, 0.0f, 0.0f, 0.0f}};
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            // B column n = g: token g's columns 128 kb + 32 q + 8 j .. + 7, permuted.
            const uint4 xb = g < nt ? xs[g * xrow + kb * 16 + q * 4 + j] : make_uint4(0, 0, 0, 0);
#pragma unroll
            for (int mt = 0; mt < 2; ++mt) {  // gate, up
                uint32_t a0[4], a1[4];
                w4::mma_word_operands<F>(word(w[i][2 * mt], j), word(w[i][2 * mt + 1], j), sc[i][2 * mt],
                                         sc[i][2 * mt + 1], j, a0, a1);
                ptx::mma_16816_bf16(d[mt], a0, xb.x, xb.y);
                ptx::mma_16816_bf16(d[mt], a1, xb.z, xb.w);
            }
        }
#pragma unroll
        for (int mt = 0; mt < 2; ++mt) {
            if constexpr (F == w4::Code4::kNvfp4) {  // the block scales are in the operands
#pragma unroll
                for (int r = 0; r < 4; ++r) acc[mt][r] += d[mt][r];
            } else {
                const float s_g = w4::scale_f32<F>(uint16_t(sc[i][2 * mt])), s_g8 = w4::scale_f32<F>(uint16_t(sc[i][2 * mt + 1]));
                acc[mt][0] = fmaf(d[mt][0], s_g, acc[mt][0]);
                acc[mt][1] = fmaf(d[mt][1], s_g, acc[mt][1]);
                acc[mt][2] = fmaf(d[mt][2], s_g8, acc[mt][2]);
                acc[mt][3] = fmaf(d[mt][3], s_g8, acc[mt][3]);
            }
        }
    }

    // 4. The warps' sums in warp order, then h = silu(gate) · up for the slot's tokens.
#pragma unroll
    for (int mt = 0; mt < 2; ++mt) {
        if (2 * q < nt) partial[warp][mt][g][2 * q] = acc[mt][0], partial[warp][mt][g + 8][2 * q] = acc[mt][2];
        if (2 * q + 1 < nt) partial[warp][mt][g][2 * q + 1] = acc[mt][1], partial[warp][mt][g + 8][2 * q + 1] = acc[mt][3];
    }
    __syncthreads();
    if (tid < kSmallRows * nt) {
        const int r = tid % kSmallRows, n = tid / kSmallRows;
        float gs = partial[0][0][r][n], us = partial[0][1][r][n];
#pragma unroll
        for (int v = 1; v < kWarps; ++v) gs += partial[v][0][r][n], us += partial[v][1][r][n];
        if constexpr (F == w4::Code4::kNvfp4) {
            // The matrices' globals, once per dot product, times 2^8: the operands carry 2^−8
            // (w4::nvfp4_operand).
            gs *= p.qglobal[3 * e] * w4::kNvfp4FoldedUnscale;
            us *= p.qglobal[3 * e + 1] * w4::kNvfp4FoldedUnscale;
        }
        const float h = gs / (1.0f + expf(-gs)) * us;
        p.h[size_t(s_dest[n]) * p.ldh + n0 + r] = __float2bfloat16_rn(h);
    }
}

}  // namespace small_int4_mma

bool small_int4_gate_up_mma_fits(const MoeExpertTable& x) {
    const bool group_ok = x.nvfp4 ? x.int4_group == 16 : x.int4_group > 0 && x.int4_group % 128 == 0 && x.H % x.int4_group == 0;
    return x.gate_q != nullptr && group_ok && x.H % 128 == 0 && x.H <= 4096 && x.I % kSmallRows == 0 &&
           x.I_shared % kSmallRows == 0;
}

size_t small_int4_gate_up_mma_smem(int nmax, int H) {
    return size_t(nmax) * size_t(H / 8 + small_int4_mma::kXPad) * 16;
}

#if !defined(QS_MOE_EMULATE)
namespace {
template <w4::Code4 F, int KS, bool V2>
void launch_ks(const SmallPlan& pl, cudaStream_t stream) {
    auto* kernel = small_int4_mma::gate_up_mma_kernel<F, KS, V2>;
    allow_dynamic_smem<small_int4_mma::gate_up_mma_kernel<F, KS, V2>>(pl.gate_up_smem);
    if constexpr (V2) {
        QS_CUDA_CHECK(ptx::launch_kernel_pdl(kernel, pl.gate_up_grid, dim3(kSmallThreads), pl.gate_up_smem, stream, pl.p));
    } else {
        kernel<<<pl.gate_up_grid, kSmallThreads, pl.gate_up_smem, stream>>>(pl.p);
        QS_CUDA_CHECK_LAUNCH();
    }
}

template <w4::Code4 F, bool V2>
void launch_v(const SmallPlan& pl, cudaStream_t stream) {
    const int ks = (pl.p.H / 128 + small_int4_mma::kWarps - 1) / small_int4_mma::kWarps;
    if (ks <= 1) launch_ks<F, 1, V2>(pl, stream);
    else if (ks == 2) launch_ks<F, 2, V2>(pl, stream);
    else launch_ks<F, 4, V2>(pl, stream);
}

template <w4::Code4 F>
void launch_f(const SmallPlan& pl, cudaStream_t stream) {
    if (pl.version == 2) launch_v<F, true>(pl, stream);
    else launch_v<F, false>(pl, stream);
}
}  // namespace

void launch_small_int4_gate_up_mma(const SmallPlan& pl, cudaStream_t stream) {
    if (pl.nvfp4) launch_f<w4::Code4::kNvfp4>(pl, stream);
    else launch_f<w4::Code4::kInt4>(pl, stream);
}
#endif

}  // namespace qs::cuda::moe

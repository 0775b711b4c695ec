// One token's MoE routing (spec §2.5), shared by the decode/prefill route kernel (moe_route.cu)
// and the small-T path (moe_small.cu): fp32 softmax over E router logits, top-k by probability
// (ties to the lower expert index), optional renormalisation of the k picks (summed in top-k
// order, as CpuOps::moe does). One warp per token; VPL = values per lane >= ceil(E / 32).
// Included by .cu files only (and, through them, by the CPU emulation bench/kernels/moe_emu.cpp).
#pragma once

#include "backend/cuda/moe_common.cuh"

namespace qs::cuda::moe {

// Called by all 32 lanes of a warp; lane j < k writes id_out[j] and w_out[j].
template <int VPL>
__device__ __forceinline__ void route_one_token(const float* logits, int E, int k, bool norm_topk_prob, int lane,
                                                int* id_out, float* w_out) {
    float v[VPL];
    float mx = -INFINITY;
#pragma unroll
    for (int i = 0; i < VPL; ++i) {
        const int e = lane + 32 * i;
        v[i] = e < E ? logits[e] : -INFINITY;
        mx = fmaxf(mx, v[i]);
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
    float sum = 0.0f;
#pragma unroll
    for (int i = 0; i < VPL; ++i) {
        const int e = lane + 32 * i;
        v[i] = e < E ? expf(v[i] - mx) : 0.0f;
        sum += v[i];
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
#pragma unroll
    for (int i = 0; i < VPL; ++i) {
        const int e = lane + 32 * i;
        v[i] = e < E ? v[i] / sum : -1.0f;  // -1: not a candidate (probabilities are >= 0)
    }

    // Top-k: k rounds of a warp arg-max over (p desc, index asc); lane j keeps the j-th pick.
    int my_id = 0;
    float my_p = 0.0f;
    for (int j = 0; j < k; ++j) {
        float best = -2.0f;
        int bi = 0x7fffffff;
#pragma unroll
        for (int i = 0; i < VPL; ++i) {
            if (v[i] > best) {  // indices rise with i, so strict '>' keeps the lower index on ties
                best = v[i];
                bi = lane + 32 * i;
            }
        }
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) {
            const float ob = __shfl_xor_sync(0xffffffffu, best, o);
            const int oi = __shfl_xor_sync(0xffffffffu, bi, o);
            if (ob > best || (ob == best && oi < bi)) {
                best = ob;
                bi = oi;
            }
        }
        if (lane == j) {
            my_id = bi;
            my_p = best;
        }
#pragma unroll
        for (int i = 0; i < VPL; ++i)
            if (lane + 32 * i == bi) v[i] = -1.0f;
    }
    float top_sum = 0.0f;  // summed in top-k order, as the CPU does
    for (int j = 0; j < k; ++j) top_sum += __shfl_sync(0xffffffffu, my_p, j);
    if (lane < k) {
        id_out[lane] = my_id;
        w_out[lane] = norm_topk_prob ? my_p / top_sum : my_p;
    }
}

}  // namespace qs::cuda::moe

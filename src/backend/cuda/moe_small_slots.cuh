// The steps the small-T down + combine kernels by expert slots share (moe_small_down_slots.cu for FP8 and
// BF16 experts, moe_small_int4.cu's down_slots_kernel for 4-bit ones): the plan and the h rows staged in
// shared memory, and the combine of one output column. Every thread of the block calls the staging
// functions. Device code; also compiled by the CPU emulation (bench/kernels/moe_emu.cpp).
#pragma once

#include "backend/cuda/moe_common.cuh"
#include "backend/cuda/moe_small_math.cuh"

namespace qs::cuda::moe::slots {

using small_math::load_cg;

// The plan (the slot count, each slot's expert, token count and h rows), the routing weights and the
// shared-expert gates, all complete when the grid starts (the router has finished: gate_up's routed
// blocks let a dependent grid start only after their own wait). Returns the slot count; ends with a
// barrier.
__device__ __forceinline__ int stage_plan(const SmallParams& p, const DownSlotsLayout& L, int* s_expert, int* s_count,
                                          int* s_dest, float* s_topw, float* s_sg, int* s_n) {
    const int tid = threadIdx.x, T = p.T, k = p.k;
    if (tid == 0) *s_n = load_cg(p.n_slots);
    for (int i = tid; i < L.max_slots; i += kSmallThreads) {
        s_expert[i] = load_cg(p.slot_expert + i);
        s_count[i] = load_cg(p.slot_count + i);
    }
    for (int i = tid; i < L.max_slots * T; i += kSmallThreads) s_dest[i] = load_cg(p.slot_dest + i);
    for (int i = tid; i < T * k; i += kSmallThreads) s_topw[i] = load_cg(p.topk_w + i);
    for (int i = tid; i < T; i += kSmallThreads) s_sg[i] = load_cg(p.shared_gate_logit + i);
    __syncthreads();
    return *s_n;
}

// gate_up's h rows 0 .. T·(k + 1) - 1 (contiguous: ldh % 8 == 0) into s_h; the caller's barrier publishes them.
__device__ __forceinline__ void stage_h(const SmallParams& p, __nv_bfloat16* s_h) {
    const int pieces = p.T * (p.k + 1) * p.ldh / 8;
    const uint4* src = reinterpret_cast<const uint4*>(p.h);
    for (int i = threadIdx.x; i < pieces; i += kSmallThreads) reinterpret_cast<uint4*>(s_h)[i] = load_cg(src + i);
}

// y[t][col] by lane t < T of the column's warp: the routed dots in j order, then the gated shared expert
// (moe_combine.cu's order, and the down kernels by token's). dots: [T·(k + 1)] by h row.
__device__ __forceinline__ void combine_column(const SmallParams& p, const float* s_topw, const float* s_sg,
                                               const float* dots, int col, int lane) {
    const int T = p.T, k = p.k;
    if (lane >= T) return;
    const int t = lane;
    float y = 0.0f;
    for (int j = 0; j < k; ++j) y += s_topw[t * k + j] * dots[t * k + j];
    y += 1.0f / (1.0f + expf(-s_sg[t])) * dots[T * k + t];
    p.y[size_t(t) * p.H + col] = y;
}

}  // namespace qs::cuda::moe::slots

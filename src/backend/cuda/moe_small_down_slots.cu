// MoE small-T path, down + combine by expert slots (MoeParams::small_down_version 2; version 1 and
// the other launches are in moe_small.cu; maths in moe_kernels.h; CPU reference:
// src/backend/cpu/cpu_moe.cpp).
// Why: version 1's grid is (T, H / kSmallCols), a block per token and 8 columns. At T = 2 its 512
// blocks are two waves at 2 blocks per SM, and each wave pays the kernel's chain of dependent round
// trips (expert id → weight pointer → weights); the shared expert's rows (and a routed expert two
// tokens share) are read once per token (bench/kernels/NOTES.md "Small-T down by slots").
// Version 2: grid H / kSmallCols (one wave at any T), warp w = output column c = c0 + w of every
// token. The block stages the plan (n_slots, each slot's expert, tokens and h rows), the slots'
// down-matrix pointers and this row block's FP8 scales, the routing weights, and all T·(k + 1) h rows
// in shared memory. Each lane then streams its 16-byte chunks of down_e[c, :] slot after slot through
// a ring of kRing slots in shared memory (cp.async: the bytes in flight hold no registers), and for
// every token of the slot computes the dot as version 1 does (the lane's chunks in order by
// down_chunk_dot, then the butterfly), kept at its h row's index. Lane t then sums y[t][c] in j
// order plus the gated shared expert, as moe_combine.cu and version 1 do: y is bitwise version 1's.
// V2 (launched with programmatic dependent launch after gate_up, small_version 2): the plan, the
// pointers, the scales and the ring's first slots are read before griddep_wait (the router has
// finished: gate_up's routed blocks let this grid start only after their own wait), h after it.
// Also compiles as host C++ for the CPU emulation (bench/kernels/moe_emu.cpp).
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/device_limits.h"
#include "backend/cuda/moe_common.cuh"
#if !defined(QS_MOE_EMULATE)
#include "backend/cuda/ptx_helpers.cuh"  // the emulation shim defines qs::cuda::ptx itself
#endif
#include "backend/cuda/moe_small_math.cuh"
#include "backend/cuda/moe_small_slots.cuh"

namespace qs::cuda::moe {
namespace {

using namespace small_math;

static_assert(kSmallCols == kSmallThreads / 32, "a warp per output column");

template <bool FP8, int CPL, bool V2>
__global__ __launch_bounds__(kSmallThreads, 2) void moe_small_down_slots_kernel(SmallParams p) {
    constexpr int VPC = FP8 ? 16 : 8;  // values per 16-byte chunk
    constexpr int kRing = kDownSlotsRing;
    const DownSlotsLayout& L = p.down_slots;
    unsigned char* sm = ptx::dynamic_smem();
    int* s_expert = reinterpret_cast<int*>(sm + L.off_expert);                  // [max_slots]
    int* s_count = reinterpret_cast<int*>(sm + L.off_count);                    // [max_slots]
    int* s_dest = reinterpret_cast<int*>(sm + L.off_dest);                      // [max_slots][T]
    const unsigned char** s_wptr = reinterpret_cast<const unsigned char**>(sm + L.off_wptr);  // [max_slots]
    const float** s_sptr = reinterpret_cast<const float**>(sm + L.off_sptr);    // [max_slots] (FP8)
    float* s_scale = reinterpret_cast<float*>(sm + L.off_scale);                // [max_slots][kb] (FP8)
    float* s_topw = reinterpret_cast<float*>(sm + L.off_topw);                  // [T·k]
    float* s_sg = reinterpret_cast<float*>(sm + L.off_sg);                      // [T]
    float* s_dots = reinterpret_cast<float*>(sm + L.off_dots);                  // [warps][T·(k + 1)]
    __nv_bfloat16* s_h = reinterpret_cast<__nv_bfloat16*>(sm + L.off_h);        // [T·(k + 1)][ldh]
    uint4* s_ring = reinterpret_cast<uint4*>(sm + L.off_ring);                  // [warps][kRing][CPL][32]
    __shared__ int s_n;

    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int T = p.T, k = p.k, E = p.E, kb = L.kb, ndots = T * (k + 1);
    const int col = blockIdx.x * kSmallCols + warp;
    const int rb = blockIdx.x * kSmallCols / 128;  // the block's 128-row scale block (kSmallCols | 128)

    // 1. The plan, the routing weights and the shared-expert gates (complete when this grid starts).
    const int n = slots::stage_plan(p, L, s_expert, s_count, s_dest, s_topw, s_sg, &s_n);
    // 2. Each slot's down matrix (and FP8 scale) pointer.
    for (int i = tid; i < n; i += kSmallThreads) {
        const int e = s_expert[i];
        s_wptr[i] = static_cast<const unsigned char*>(p.down[e]);
        if constexpr (FP8) s_sptr[i] = p.down_scale[e];
    }
    __syncthreads();

    auto width_of = [&](int e) { return e == E ? p.I_shared : p.I; };
    // Slot s's chunks of this lane (c = lane + 32u of down_e[col, :]) into ring place s % kRing.
    auto issue = [&](int s) {
        if (s < n) {
            const int Ie = width_of(s_expert[s]), nch = Ie / VPC;
            const unsigned char* row = s_wptr[s] + size_t(col) * size_t(Ie) * (FP8 ? 1 : 2);
            uint4* dst = s_ring + (size_t(warp * kRing + s % kRing) * CPL) * 32 + lane;
#pragma unroll
            for (int u = 0; u < CPL; ++u) {
                const int c = lane + 32 * u;
                ptx::cp_async16(ptx::smem_u32(dst + 32 * u), row + size_t(c < nch ? c : 0) * 16, c < nch ? 16 : 0);
            }
        }
        ptx::cp_async_commit();  // an empty group past the last slot keeps the waits' count
    };
    for (int s = 0; s < kRing - 1; ++s) issue(s);
    if constexpr (FP8) {  // the slots' scales of this row block: [rb][kb_e] of each [ceil(H/128)][kb_e]
        for (int i = tid; i < n * kb; i += kSmallThreads) {
            const int s = i / kb, q = i % kb, kbe = (width_of(s_expert[s]) + 127) / 128;
            s_scale[i] = q < kbe ? s_sptr[s][rb * kbe + q] : 0.0f;
        }
    }
    if constexpr (V2) ptx::griddep_wait();  // gate_up's h
    slots::stage_h(p, s_h);
    __syncthreads();

    // 3. Stream the slots: dot of down_e[col, :] with each of the slot's h rows.
    float* dots = s_dots + warp * ndots;
    for (int s = 0; s < n; ++s) {
        issue(s + kRing - 1);
        ptx::cp_async_wait<kRing - 1>();  // slot s's chunks (this lane's own copies) have landed
        const int Ie = width_of(s_expert[s]), nch = Ie / VPC;
        const uint4* wr = s_ring + (size_t(warp * kRing + s % kRing) * CPL) * 32 + lane;
        const int cnt = s_count[s];
        for (int m = 0; m < cnt; ++m) {
            const int dest = s_dest[s * T + m];
            const __nv_bfloat16* hrow = s_h + size_t(dest) * p.ldh;
            float part = 0.0f;
#pragma unroll
            for (int u = 0; u < CPL; ++u) {
                const int c = lane + 32 * u;
                if (c >= nch) continue;
                const uint4 w = wr[32 * u];
                const uint4 h0 = *reinterpret_cast<const uint4*>(hrow + c * VPC);
                const uint4 h1 = FP8 ? *reinterpret_cast<const uint4*>(hrow + c * VPC + 8) : make_uint4(0, 0, 0, 0);
                const float sum = down_chunk_dot<FP8>(w, h0, h1);
                if constexpr (FP8) part = fmaf(sum, s_scale[s * kb + c * VPC / 128] * kFp8Unscale, part);
                else part += sum;
            }
#pragma unroll
            for (int o = 16; o > 0; o >>= 1) part += __shfl_xor_sync(0xffffffffu, part, o);
            if (lane == 0) dots[dest] = expert_out(part, p.eout_bf16);
        }
    }
    __syncwarp();
    // 4. y[t][col]: the routed dots in j order, then the gated shared expert.
    slots::combine_column(p, s_topw, s_sg, dots, col, lane);
}

}  // namespace

#if !defined(QS_MOE_EMULATE)
namespace {

template <bool FP8, int CPL, bool V2>
void launch_down_slots(const SmallPlan& pl, cudaStream_t stream) {
    auto* kernel = moe_small_down_slots_kernel<FP8, CPL, V2>;
    allow_dynamic_smem<moe_small_down_slots_kernel<FP8, CPL, V2>>(pl.p.down_slots.bytes);
    if constexpr (V2) {
        QS_CUDA_CHECK(ptx::launch_kernel_pdl(kernel, pl.down_grid, dim3(kSmallThreads), pl.p.down_slots.bytes, stream,
                                             pl.p));
    } else {
        kernel<<<pl.down_grid, kSmallThreads, pl.p.down_slots.bytes, stream>>>(pl.p);
        QS_CUDA_CHECK_LAUNCH();
    }
}

template <bool FP8, bool V2>
void launch_down_slots_cpl(const SmallPlan& pl, cudaStream_t stream) {
    if (pl.p.down_slots.cpl == 1) launch_down_slots<FP8, 1, V2>(pl, stream);
    else launch_down_slots<FP8, 2, V2>(pl, stream);
}

}  // namespace

void launch_small_down_slots(const SmallPlan& pl, cudaStream_t stream) {
    const bool v2 = pl.version == 2;
    if (pl.fp8 && v2) launch_down_slots_cpl<true, true>(pl, stream);
    else if (pl.fp8) launch_down_slots_cpl<true, false>(pl, stream);
    else if (v2) launch_down_slots_cpl<false, true>(pl, stream);
    else launch_down_slots_cpl<false, false>(pl, stream);
}
#endif

}  // namespace qs::cuda::moe

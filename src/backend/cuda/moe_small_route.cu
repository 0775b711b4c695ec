// MoE small-T path, first launch: routing and the list of distinct experts (moe_small.cu has the
// other two; maths in moe_kernels.h; CPU reference: src/backend/cpu/cpu_moe.cpp).
//  v1  moe_small_route_kernel   one block: small_route_block on the caller's router logits.
//  v2  moe_small_router_kernel  grid E + 1 blocks of 8 warps: block = one row of the fp32 router
//                               weight (rows 0..E-1) or the shared-expert gate (row E) for all T
//                               tokens, warp w = slice w of the row's H columns (lanes stride over
//                               16-byte chunks, all in flight; fp32 FMAs in chunk order, then a
//                               butterfly), the 8 slice sums added in slice order (33 blocks of one
//                               row per warp left most SMs idle: bench/kernels/NOTES.md "Router
//                               rows split") → logits_out [T, E] / sg_out [T]; each block then counts itself on
//                               p.counter (fence, atomicAdd) and the last one copies the logits to
//                               shared memory, resets the counter to 0 and runs small_route_block.
//                               Every block first lets the next grid (gate_up, launched with
//                               programmatic dependent launch) start: its shared-expert blocks need
//                               nothing from here and stream their weights while the router runs.
// small_route_block (one block of kSmallThreads, warp t = token t): route_one_token (fp32 softmax,
// top-k with ties to the lower index, norm_topk_prob: the grouped path's code) → topk_id/topk_w;
// then thread i of the T·k pairs finds the first pair with its expert and its rank among that
// expert's pairs: the slots (slot 0 = the shared expert, all T tokens, h rows T·k + t; slot s >= 1
// = the s-th distinct routed expert in pair order, its tokens in token order, h rows t·k + j),
// their counts and n_slots.
// Also compiles as host C++ for the CPU emulation (bench/kernels/moe_emu.cpp).
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/f32_slice_dot.cuh"
#include "backend/cuda/moe_common.cuh"
#include "backend/cuda/moe_route_token.cuh"
#if !defined(QS_MOE_EMULATE)
#include "backend/cuda/ptx_helpers.cuh"  // the emulation shim defines qs::cuda::ptx itself
#endif
#include "backend/cuda/moe_small_math.cuh"

namespace qs::cuda::moe {
namespace {

using namespace small_math;

constexpr int kRouterWarps = kSmallThreads / 32;  // slices of a router row (one row per block)
constexpr int kRouterLoads = 4;                   // 16-byte weight loads in flight per lane
constexpr int kRouteMaxLogits = kMoeSmallTMax * 512;  // T·E (E <= 512, host check)

__device__ __forceinline__ float4 router_load4(const float4* p) {
#if defined(QS_MOE_EMULATE)
    return *p;
#else
    return __ldg(p);
#endif
}

// All kSmallThreads threads of the block call it; logits [T, E].
template <int VPL>
__device__ __forceinline__ void small_route_block(const SmallParams& p, const float* logits) {
    __shared__ int s_id[kSmallThreads];
    __shared__ float s_w[kSmallThreads];
    __shared__ int s_first[kSmallThreads];
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int n = p.T * p.k;  // <= kSmallThreads (host check)
    if (warp < p.T) route_one_token<VPL>(logits + size_t(warp) * p.E, p.E, p.k, p.norm_topk_prob, lane,
                                         s_id + warp * p.k, s_w + warp * p.k);
    __syncthreads();
    int e = -1, first = tid, pos = 0;
    if (tid < n) {
        e = s_id[tid];
        p.topk_id[tid] = e;
        p.topk_w[tid] = s_w[tid];
        for (int i = 0; i < tid; ++i) {
            if (s_id[i] == e) {
                if (first == tid) first = i;
                ++pos;  // earlier tokens of the same expert (one pair per token and expert)
            }
        }
        s_first[tid] = first == tid ? 1 : 0;
    }
    __syncthreads();
    if (tid < n) {
        int slot = 1;
        for (int i = 0; i < first; ++i) slot += s_first[i];
        p.slot_dest[slot * p.T + pos] = tid;
        if (first == tid) {
            int c = 0;
            for (int i = tid; i < n; ++i) c += s_id[i] == e ? 1 : 0;
            p.slot_expert[slot] = e;
            p.slot_count[slot] = c;
        }
    }
    if (tid < p.T) p.slot_dest[tid] = n + tid;  // slot 0: the shared expert, every token
    if (tid == 0) {
        int c = 1;
        for (int i = 0; i < n; ++i) c += s_first[i];
        *p.n_slots = c;
        p.slot_expert[0] = p.E;
        p.slot_count[0] = p.T;
    }
}

template <int VPL>
__global__ __launch_bounds__(kSmallThreads) void moe_small_route_kernel(SmallParams p) {
    small_route_block<VPL>(p, p.router_logits);
}

// NMAX: the token bucket of T (1, 2, 4, 8), so that T = 1 keeps one accumulator.
template <int VPL, int NMAX>
__global__ __launch_bounds__(kSmallThreads) void moe_small_router_kernel(SmallParams p) {
    ptx::griddep_launch_dependents();
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int T = p.T, E = p.E, n4 = p.H / 4;  // H % 128 == 0
    const int row = blockIdx.x;                // 0..E-1 router rows, E the shared-expert gate
    const int c_begin = n4 * warp / kRouterWarps, c_end = n4 * (warp + 1) / kRouterWarps;
    const float4* w = reinterpret_cast<const float4*>(row < E ? p.router_w + size_t(row) * p.H : p.sgate_w);
    const float4* x = reinterpret_cast<const float4*>(p.x);
    float acc[NMAX];
    f32_slice_dot<NMAX, kRouterLoads>(w, x, n4, T, c_begin, c_end, lane, [](const float4* q) { return router_load4(q); },
                                      acc);
    __shared__ float s_part[kRouterWarps][NMAX];
    if (lane == 0) {
#pragma unroll
        for (int n = 0; n < NMAX; ++n) s_part[warp][n] = acc[n];
    }
    __syncthreads();
    if (int(threadIdx.x) < T) {  // the slices in order
        const int n = threadIdx.x;
        float v = 0.0f;
#pragma unroll
        for (int s = 0; s < kRouterWarps; ++s) v += s_part[s][n];
        if (row < E) p.logits_out[size_t(n) * E + row] = v;
        else p.sg_out[n] = v;
        __threadfence();  // the logits before this block's count
    }
    __shared__ int s_last;
    __syncthreads();
    if (threadIdx.x == 0) s_last = atomicAdd(p.counter, 1) == int(gridDim.x) - 1 ? 1 : 0;
    __syncthreads();
    if (!s_last) return;
    // The last block: every other block's logits are written and fenced.
    __threadfence();
    __shared__ float s_logits[kRouteMaxLogits];
    for (int i = threadIdx.x; i < T * E; i += kSmallThreads) s_logits[i] = load_cg(p.logits_out + i);  // another block's: L2, not L1
    if (threadIdx.x == 0) *p.counter = 0;  // ready for the next call
    __syncthreads();
    small_route_block<VPL>(p, s_logits);
}

}  // namespace

#if !defined(QS_MOE_EMULATE)
namespace {

template <int VPL>
void launch_router(const SmallPlan& pl, cudaStream_t stream) {
    const dim3 grid(pl.router_blocks);
    switch (pl.nmax) {
        case 1: moe_small_router_kernel<VPL, 1><<<grid, kSmallThreads, 0, stream>>>(pl.p); break;
        case 2: moe_small_router_kernel<VPL, 2><<<grid, kSmallThreads, 0, stream>>>(pl.p); break;
        case 4: moe_small_router_kernel<VPL, 4><<<grid, kSmallThreads, 0, stream>>>(pl.p); break;
        default: moe_small_router_kernel<VPL, 8><<<grid, kSmallThreads, 0, stream>>>(pl.p); break;
    }
}

}  // namespace

void launch_small_route(const SmallPlan& pl, cudaStream_t stream) {
    if (pl.version == 2) {
        if (pl.zero_counter) QS_CUDA_CHECK(cudaMemsetAsync(pl.p.counter, 0, sizeof(int), stream));
        switch (pl.route_vpl) {
            case 1: launch_router<1>(pl, stream); break;
            case 2: launch_router<2>(pl, stream); break;
            case 4: launch_router<4>(pl, stream); break;
            case 8: launch_router<8>(pl, stream); break;
            default: launch_router<16>(pl, stream); break;
        }
        QS_CUDA_CHECK_LAUNCH();
        return;
    }
    switch (pl.route_vpl) {
        case 1: moe_small_route_kernel<1><<<1, kSmallThreads, 0, stream>>>(pl.p); break;
        case 2: moe_small_route_kernel<2><<<1, kSmallThreads, 0, stream>>>(pl.p); break;
        case 4: moe_small_route_kernel<4><<<1, kSmallThreads, 0, stream>>>(pl.p); break;
        case 8: moe_small_route_kernel<8><<<1, kSmallThreads, 0, stream>>>(pl.p); break;
        default: moe_small_route_kernel<16><<<1, kSmallThreads, 0, stream>>>(pl.p); break;
    }
    QS_CUDA_CHECK_LAUNCH();
}
#endif

}  // namespace qs::cuda::moe

// MoE stages 1-2 (see moe_kernels.cu for the whole pipeline): routing (fp32 softmax, top-k with
// ties to the lower index, renormalisation, x -> bf16) and the one-block sort of the (token,
// expert) pairs by expert into the GEMMs' tile list. CPU reference: src/backend/cpu/cpu_moe.cpp.
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/moe_common.cuh"
#include "backend/cuda/moe_route_token.cuh"

namespace qs::cuda::moe {
namespace {

// ---------------------------------------------------------------------------------------------
// 1. Routing
// ---------------------------------------------------------------------------------------------

// VPL = values per lane = ceil(E / 32) rounded up to the instantiated size.
template <int VPL>
__global__ __launch_bounds__(kRouteWarps * 32) void moe_route_kernel(RouteParams p) {
    const int lane = threadIdx.x & 31;
    const int t = blockIdx.x * kRouteWarps + (threadIdx.x >> 5);
    if (t >= p.T) return;
    route_one_token<VPL>(p.router_logits + size_t(t) * p.E, p.E, p.k, p.norm_topk_prob, lane,
                         p.topk_id + size_t(t) * p.k, p.topk_w + size_t(t) * p.k);

    if (p.xb == nullptr) return;
    const float4* xs = reinterpret_cast<const float4*>(p.x + size_t(t) * p.H);
    uint2* xd = reinterpret_cast<uint2*>(p.xb + size_t(t) * p.H);
    for (int c = lane; c < p.H / 4; c += 32) {
        const float4 f = xs[c];
        const float sc = p.x_scale;
        xd[c] = make_uint2(pack_bf16x2(f.x * sc, f.y * sc), pack_bf16x2(f.z * sc, f.w * sc));
    }
}

// ---------------------------------------------------------------------------------------------
// 2. Sort by expert + tile list (one block)
// ---------------------------------------------------------------------------------------------

// Exclusive scan over the block (one value per thread); *total gets the sum.
__device__ int block_exclusive_scan(int v, int* warp_sums, int* total) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    int inc = v;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
        const int n = __shfl_up_sync(0xffffffffu, inc, o);
        if (lane >= o) inc += n;
    }
    if (lane == 31) warp_sums[warp] = inc;
    __syncthreads();
    if (warp == 0) {
        const int nw = blockDim.x >> 5;
        int s = lane < nw ? warp_sums[lane] : 0;
#pragma unroll
        for (int o = 1; o < 32; o <<= 1) {
            const int n = __shfl_up_sync(0xffffffffu, s, o);
            if (lane >= o) s += n;
        }
        warp_sums[lane] = s;  // inclusive prefix of the warp totals
    }
    __syncthreads();
    const int base = warp > 0 ? warp_sums[warp - 1] : 0;
    *total = warp_sums[(blockDim.x >> 5) - 1];
    __syncthreads();  // warp_sums is reused by the next scan
    return base + inc - v;
}

template <int BM>
__global__ __launch_bounds__(kSortThreads) void moe_sort_kernel(SortParams p) {
    __shared__ int s_cnt[kSortThreads];
    __shared__ int s_off[kSortThreads];
    __shared__ int s_warp[32];
    const int tid = threadIdx.x;
    const int E = p.E, n_pairs = p.T * p.k;

    s_cnt[tid] = tid == E ? p.T : 0;  // expert E = the shared expert, all T tokens
    __syncthreads();
    constexpr int kU = 8;
    for (int base = 0; base < n_pairs; base += kSortThreads * kU) {
        int ids[kU];
#pragma unroll
        for (int u = 0; u < kU; ++u) {
            const int i = base + u * kSortThreads + tid;
            ids[u] = i < n_pairs ? p.topk_id[i] : -1;
        }
#pragma unroll
        for (int u = 0; u < kU; ++u)
            if (ids[u] >= 0) atomicAdd(&s_cnt[ids[u]], 1);
    }
    __syncthreads();

    const int cnt = tid <= E ? s_cnt[tid] : 0;
    const int tiles = (cnt + BM - 1) / BM;
    int total_rows, total_tiles;
    const int row_off = block_exclusive_scan(cnt, s_warp, &total_rows);
    const int tile_off = block_exclusive_scan(tiles, s_warp, &total_tiles);
    if (tid <= E) s_off[tid] = row_off;
    if (p.expert_off != nullptr && tid <= E) {
        p.expert_off[tid] = row_off;
        if (tid == E) p.expert_off[E + 1] = row_off + cnt;
    }
    if (tid == 0) *p.num_tiles = total_tiles;
    for (int i = 0; i < tiles; ++i)
        p.work[tile_off + i] = make_int4(tid, row_off + i * BM, cnt - i * BM < BM ? cnt - i * BM : BM, 0);
    s_cnt[tid] = 0;  // reused as per-expert cursors (every read of s_cnt happened before the scans' barriers)
    __syncthreads();

    for (int base = 0; base < n_pairs; base += kSortThreads * kU) {
        int ids[kU];
#pragma unroll
        for (int u = 0; u < kU; ++u) {
            const int i = base + u * kSortThreads + tid;
            ids[u] = i < n_pairs ? p.topk_id[i] : -1;
        }
#pragma unroll
        for (int u = 0; u < kU; ++u) {
            if (ids[u] < 0) continue;
            const int i = base + u * kSortThreads + tid;
            const int r = s_off[ids[u]] + atomicAdd(&s_cnt[ids[u]], 1);
            p.row_token[r] = i / p.k;
            p.row_dest[r] = i;
            if (p.row_pos != nullptr) p.row_pos[i] = r;
        }
    }
    const int shared_off = s_off[E];  // == T·k
    for (int t = tid; t < p.T; t += kSortThreads) {
        p.row_token[shared_off + t] = t;
        p.row_dest[shared_off + t] = n_pairs + t;
        if (p.row_pos != nullptr) p.row_pos[n_pairs + t] = shared_off + t;
    }
}

}  // namespace

#if !defined(QS_MOE_EMULATE)
void launch_route(const MoePlan& pl, cudaStream_t stream) {
    const dim3 rb(kRouteWarps * 32);
    switch (pl.route_vpl) {
        case 1: moe_route_kernel<1><<<pl.route_grid, rb, 0, stream>>>(pl.route); break;
        case 2: moe_route_kernel<2><<<pl.route_grid, rb, 0, stream>>>(pl.route); break;
        case 4: moe_route_kernel<4><<<pl.route_grid, rb, 0, stream>>>(pl.route); break;
        case 8: moe_route_kernel<8><<<pl.route_grid, rb, 0, stream>>>(pl.route); break;
        default: moe_route_kernel<16><<<pl.route_grid, rb, 0, stream>>>(pl.route); break;
    }
    QS_CUDA_CHECK_LAUNCH();
}

template <class Cfg>
void launch_sort(const MoePlan& pl, cudaStream_t stream) {
    moe_sort_kernel<Cfg::BM><<<1, kSortThreads, 0, stream>>>(pl.sort);
    QS_CUDA_CHECK_LAUNCH();
}

template void launch_sort<CfgS16>(const MoePlan&, cudaStream_t);
template void launch_sort<CfgS32>(const MoePlan&, cudaStream_t);
template void launch_sort<CfgL128>(const MoePlan&, cudaStream_t);
template void launch_sort<CfgS16N>(const MoePlan&, cudaStream_t);
#endif

}  // namespace qs::cuda::moe

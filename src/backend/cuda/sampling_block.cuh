// Block-wide pieces of the GPU sampler (sampling_kernels.cu: one block per row; sampling_chunked.cu:
// a row's vocabulary spread over several blocks): reductions in a fixed order and the radix
// selection's choice of a digit from a histogram. Every block has kSamplingThreads threads.
#pragma once

#include <cstdint>

namespace qs::cuda::sampling {

constexpr int kSamplingThreads = 512;
constexpr int kWarps = kSamplingThreads / 32;
constexpr int kMaxBins = 4096;  // the widest radix digit (12 bits)
constexpr unsigned kFull = 0xffffffffu;
// Radix digits from the top of a 32-bit key: 12, 12 and 8 bits.
constexpr int kRounds = 3;
__device__ __forceinline__ int digit_shift(int round) { return round == 0 ? 20 : round == 1 ? 8 : 0; }
__device__ __forceinline__ int digit_width(int round) { return round == 2 ? 8 : 12; }
__device__ __forceinline__ int digits_fixed_before(int round) { return round == 0 ? 0 : round == 1 ? 12 : 24; }

using u64 = unsigned long long;

struct ReduceSmem {
    double d[kWarps];
    u64 u[kWarps];
    float f[kWarps];
};

__device__ __forceinline__ float block_max(float v, ReduceSmem& sm) {
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(kFull, v, o));
    __syncthreads();
    if (threadIdx.x % 32 == 0) sm.f[threadIdx.x / 32] = v;
    __syncthreads();
    v = sm.f[0];
    for (int w = 1; w < kWarps; ++w) v = fmaxf(v, sm.f[w]);
    return v;
}

__device__ __forceinline__ double block_sum(double v, ReduceSmem& sm) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(kFull, v, o);
    __syncthreads();
    if (threadIdx.x % 32 == 0) sm.d[threadIdx.x / 32] = v;
    __syncthreads();
    v = sm.d[0];
    for (int w = 1; w < kWarps; ++w) v += sm.d[w];
    return v;
}

// The exclusive prefix sum of v over threads in thread order.
__device__ __forceinline__ u64 block_exclusive_scan(u64 v, ReduceSmem& sm) {
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    u64 inc = v;
    for (int o = 1; o < 32; o <<= 1) {
        const u64 x = __shfl_up_sync(kFull, inc, o);
        if (lane >= o) inc += x;
    }
    __syncthreads();
    if (lane == 31) sm.u[warp] = inc;
    __syncthreads();
    u64 before = 0;
    for (int w = 0; w < warp; ++w) before += sm.u[w];
    return before + inc - v;
}

// The best (score, index) of a block: the largest score, the lowest index on ties; index -1
// (nothing eligible) loses to everything. Returns the index; `score` becomes the winner's.
template <class Score>
__device__ __forceinline__ int32_t block_argmax(Score& score, int32_t index, Score* s_score, int32_t* s_index) {
    for (int o = 16; o > 0; o >>= 1) {
        const Score os = __shfl_xor_sync(kFull, score, o);
        const int32_t oi = __shfl_xor_sync(kFull, index, o);
        if (oi >= 0 && (index < 0 || os > score || (os == score && oi < index))) score = os, index = oi;
    }
    __syncthreads();
    if (threadIdx.x % 32 == 0) s_score[threadIdx.x / 32] = score, s_index[threadIdx.x / 32] = index;
    __syncthreads();
    score = s_score[0], index = s_index[0];
    for (int w = 1; w < kWarps; ++w) {
        const Score os = s_score[w];
        const int32_t oi = s_index[w];
        if (oi >= 0 && (index < 0 || os > score || (os == score && oi < index))) score = os, index = oi;
    }
    return index;
}

struct SelectSmem {
    u64 hist[kMaxBins];
    uint32_t sel;
    double above;
    double target;
};

struct BucketPick {
    uint32_t digit;  // the chosen digit
    double above;    // the weight of everything above it
};

// One round of radix selection on a complete histogram: sm.hist[b] is the weight of the eligible
// elements whose current digit is b (bins of them). Walking the digits from the top with the sum
// starting at `above`, the digit at which the sum first reaches the target. In the first round with
// fraction > 0 the target becomes fraction × the total weight. Weights are integers, so the sums
// do not depend on the order in which the histogram was filled.
__device__ __forceinline__ BucketPick pick_digit(int bins, double above, double& target, double fraction, bool first,
                                                 SelectSmem& sm, ReduceSmem& red) {
    // Thread t owns `per` bins counted from the top; the one whose range crosses the target walks them.
    const int per = bins >= kSamplingThreads ? bins / kSamplingThreads : 1;
    const int owners = bins / per;
    const int t = threadIdx.x;
    if (t == 0) sm.sel = 0, sm.above = above;
    u64 local = 0;
    if (t < owners)
        for (int j = 0; j < per; ++j) local += sm.hist[bins - 1 - (t * per + j)];
    const u64 excl = block_exclusive_scan(local, red);  // its barriers order sm.sel's reset first
    if (first && fraction > 0.0) {
        // The total is the last owner's inclusive sum.
        if (t == owners - 1) sm.target = fraction * double(excl + local);
        __syncthreads();
        target = sm.target;
    }
    if (t < owners && local > 0) {
        const double before = above + double(excl);
        if (before < target && before + double(local) >= target) {
            double cum = before;
            for (int j = 0; j < per; ++j) {
                const int b = bins - 1 - (t * per + j);
                if (cum + double(sm.hist[b]) >= target) {
                    sm.sel = uint32_t(b);
                    sm.above = cum;
                    break;
                }
                cum += double(sm.hist[b]);
            }
        }
    }
    __syncthreads();
    const BucketPick pick{sm.sel, sm.above};
    __syncthreads();  // sm is refilled by the next round
    return pick;
}

// The top n (<= 20) raw logits of a row, gathered unordered into ids / vals (shared memory): sorted
// by value descending, then id ascending (insertion sort, one thread), written as ids and
// logprobs (value - lse).
__device__ __forceinline__ void write_top_logprobs(int32_t* ids, float* vals, int n, float lse, int32_t* top_ids,
                                                   float* top_logprobs) {
    for (int a = 1; a < n; ++a)
        for (int b = a; b > 0; --b) {
            const bool swap = vals[b] > vals[b - 1] || (vals[b] == vals[b - 1] && ids[b] < ids[b - 1]);
            if (!swap) break;
            const float tv = vals[b];
            const int32_t ti = ids[b];
            vals[b] = vals[b - 1], ids[b] = ids[b - 1];
            vals[b - 1] = tv, ids[b - 1] = ti;
        }
    for (int a = 0; a < n; ++a) {
        top_ids[a] = ids[a];
        top_logprobs[a] = vals[a] - lse;
    }
}

}  // namespace qs::cuda::sampling

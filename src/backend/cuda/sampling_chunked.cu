// The sampler's per-row passes over vocabulary chunks (see sampling_chunked.h). Grid (chunks, R):
// block (c, row) reads ids [c·chunk, (c+1)·chunk) of its row. A launch whose rows need the whole
// row's result ends with a last-block step: every block fences its global writes and counts
// itself on the row's RowSelect::done; the block that counts last sees them all and finishes the
// row (the threadFenceReduction pattern), then resets the counter for the next launch.
// Also compiles as host C++ for the CPU emulation (bench/kernels/emu/sampling_emu.cpp).
#include "backend/cuda/sampling_chunked.h"

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/ptx_helpers.cuh"
#include "backend/cuda/sampling_block.cuh"
#include "backend/sampling_math.h"
#include "core/check.h"

namespace qs::cuda {

namespace {

using namespace sampling;
constexpr int kThreads = kSamplingThreads;

enum class Select { kStats, kTopK, kTopP };

struct ChunkRange {
    int64_t lo, hi;
};

// This block's ids of its row: chunks = gridDim.x of ceil(V / chunks) ids.
__device__ __forceinline__ ChunkRange chunk_range(int64_t V) {
    const int64_t chunk = (V + gridDim.x - 1) / gridDim.x;
    const int64_t lo = int64_t(blockIdx.x) * chunk < V ? int64_t(blockIdx.x) * chunk : V;
    return {lo, lo + chunk < V ? lo + chunk : V};
}

__device__ __forceinline__ bool has_top_k(const SampleRow& r, int64_t V) {
    return !r.greedy() && r.top_k > 0 && r.top_k < V;
}
__device__ __forceinline__ bool has_top_p(const SampleRow& r) { return !r.greedy() && r.top_p < 1.0f; }
__device__ __forceinline__ float inv_temperature(const SampleRow& r) { return float(1.0 / double(r.temperature)); }

// Whether this block is the last of its row's blocks to finish this launch (then every other
// block's global writes are visible to it). Called by all threads after their global writes.
__device__ __forceinline__ bool last_block_of_row(uint32_t* done, bool& s_last) {
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0) s_last = atomicAdd(done, 1u) == gridDim.x - 1;
    __syncthreads();
    if (!s_last) return false;
    __threadfence();
    if (threadIdx.x == 0) *done = 0;  // every block of the row has counted: ready for the next launch
    return true;
}

// ---- the row's max: raw (statistics) or of l · inv_t (thresholds) -----------------------------

template <bool Raw>
__global__ void __launch_bounds__(kThreads) chunk_max_kernel(SamplingLaunch p, ChunkedScratch s) {
    __shared__ ReduceSmem red;
    const SampleRow r = p.rows[blockIdx.y];
    if (Raw ? r.num_top_logprobs < 0 : r.greedy()) return;
    const float* l = p.logits + int64_t(r.logits_row) * p.V;
    const ChunkRange c = chunk_range(p.V);
    const float inv_t = Raw ? 1.0f : inv_temperature(r);
    float m = -INFINITY;
    for (int64_t i = c.lo + threadIdx.x; i < c.hi; i += kThreads) m = fmaxf(m, Raw ? l[i] : l[i] * inv_t);
    m = block_max(m, red);  // fmaxf: the same value in any order (NaN is not expected)
    RowSelect& st = s.rows[blockIdx.y];
    if (threadIdx.x == 0) atomicMax(Raw ? &st.raw_max_key : &st.max_key, float_order_key(m));
}

// ---- one radix round of a selection (sampling_block.cuh pick_digit) ----------------------------

struct RoundSmem {
    ReduceSmem red;
    SelectSmem sel;
    bool last;
};

// Statistics: the N-th largest raw logit by count (round 0 also sums exp(l - max) per chunk for
// the lse). Top-k: the k-th largest l · inv_t by count. Top-p: over s = l · inv_t >= tau_k, the key
// at which the fixed-point weights exp(s - m) summed from the top reach top_p of their total.
template <Select S>
__global__ void __launch_bounds__(kThreads) select_round_kernel(SamplingLaunch p, ChunkedScratch s, int round) {
    __shared__ RoundSmem sm;
    const int row = int(blockIdx.y);
    const SampleRow r = p.rows[row];
    RowSelect* st = s.rows + row;
    const int n = r.num_top_logprobs;
    bool sums = false, hist = false;
    if constexpr (S == Select::kStats) {
        sums = round == 0 && n >= 0;
        hist = n > 0;
    } else if constexpr (S == Select::kTopK) {
        hist = has_top_k(r, p.V);
    } else {
        hist = has_top_p(r);
    }
    if (!sums && !hist) return;
    const float* l = p.logits + int64_t(r.logits_row) * p.V;
    const ChunkRange c = chunk_range(p.V);
    const int shift = digit_shift(round), bins = 1 << digit_width(round), fixed = digits_fixed_before(round);
    const uint32_t prefix = st->prefix;  // written by the previous round's launch
    const float inv_t = S == Select::kStats ? 1.0f : inv_temperature(r);
    const float m = float_from_order_key(S == Select::kStats ? st->raw_max_key : st->max_key);
    const float tau_k = S == Select::kTopP && has_top_k(r, p.V) ? st->tau_k : -INFINITY;

    for (int b = threadIdx.x; b < bins; b += kThreads) sm.sel.hist[b] = 0;
    __syncthreads();
    double sum = 0.0;
    for (int64_t i = c.lo + threadIdx.x; i < c.hi; i += kThreads) {
        const float v = l[i];
        if (sums) sum += double(expf(v - m));
        if (!hist) continue;
        uint32_t key;
        u64 w = 1;
        if constexpr (S == Select::kStats) {
            key = float_order_key(v);
        } else if constexpr (S == Select::kTopK) {
            key = float_order_key(v * inv_t);
        } else {
            const float sv = v * inv_t;
            if (!(sv >= tau_k)) continue;
            key = float_order_key(sv);
            w = sampling_weight_fixed(sv, m);
            if (w == 0) continue;
        }
        if (fixed > 0 && (key >> (32 - fixed)) != (prefix >> (32 - fixed))) continue;
        atomicAdd(&sm.sel.hist[(key >> shift) & uint32_t(bins - 1)], w);
    }
    __syncthreads();
    u64* gh = s.hist + size_t(row) * kMaxBins;
    if (hist)
        for (int b = threadIdx.x; b < bins; b += kThreads)
            if (sm.sel.hist[b] != 0) atomicAdd(gh + b, sm.sel.hist[b]);  // integers: any order, same sums
    if (sums) {
        sum = block_sum(sum, sm.red);
        if (threadIdx.x == 0) s.chunk_sum[size_t(row) * gridDim.x + blockIdx.x] = sum;
    }
    if (!last_block_of_row(&st->done, sm.last)) return;

    if (sums) {
        double total = 0.0;  // chunk order: the lse does not depend on which block came last
        for (unsigned ch = 0; ch < gridDim.x; ++ch) total += __ldcg(s.chunk_sum + size_t(row) * gridDim.x + ch);
        if (threadIdx.x == 0) p.lse[row] = float(double(m) + log(total));
    }
    if (!hist) return;
    for (int b = threadIdx.x; b < bins; b += kThreads) {
        sm.sel.hist[b] = __ldcg(gh + b);
        gh[b] = 0;  // zero again for the next round or selection
    }
    __syncthreads();
    double target = S == Select::kStats ? double(n) : S == Select::kTopK ? double(r.top_k) : st->target;
    const double fraction = S == Select::kTopP ? double(r.top_p) : 0.0;
    const BucketPick pick = pick_digit(bins, round == 0 ? 0.0 : st->above, target, fraction, round == 0, sm.sel, sm.red);
    if (threadIdx.x == 0) {
        const uint32_t key = prefix | pick.digit << shift;
        if (round + 1 < kRounds) {
            st->prefix = key;
            st->above = pick.above;
            st->target = target;
        } else {
            st->prefix = 0;  // the next selection on this row starts afresh
            st->above = 0.0;
            st->target = 0.0;
            if constexpr (S == Select::kStats) st->kth = key;
            else if constexpr (S == Select::kTopK) st->tau_k = float_from_order_key(key);
            else st->tau_p = float_from_order_key(key);
        }
    }
}

// ---- statistics: the top N ids -----------------------------------------------------------------

struct GatherSmem {
    ReduceSmem red;
    bool last;
    int32_t ids[kMaxTopLogprobs];
    float vals[kMaxTopLogprobs];
};

// Every id above kth (fewer than N in all), and per chunk its lowest N ids at kth in id order;
// the row's last block takes the ties chunk by chunk until N, sorts (value descending, id
// ascending) and writes the top logprobs.
__global__ void __launch_bounds__(kThreads) top_gather_kernel(SamplingLaunch p, ChunkedScratch s) {
    __shared__ GatherSmem sm;
    const int row = int(blockIdx.y);
    const SampleRow r = p.rows[row];
    const int n = r.num_top_logprobs;
    if (n <= 0) return;
    RowSelect* st = s.rows + row;
    const uint32_t kth = st->kth;
    const float* l = p.logits + int64_t(r.logits_row) * p.V;
    const ChunkRange c = chunk_range(p.V);
    for (int64_t i = c.lo + threadIdx.x; i < c.hi; i += kThreads)
        if (float_order_key(l[i]) > kth) s.above_ids[row * kMaxTopLogprobs + atomicAdd(&st->above_count, 1)] = int32_t(i);
    // Ties: thread t scans a contiguous piece, so ranks follow ids.
    const int64_t per = (c.hi - c.lo + kThreads - 1) / kThreads;
    const int64_t lo = c.lo + int64_t(threadIdx.x) * per < c.hi ? c.lo + int64_t(threadIdx.x) * per : c.hi;
    const int64_t hi = lo + per < c.hi ? lo + per : c.hi;
    u64 ties = 0;
    for (int64_t i = lo; i < hi; ++i) ties += float_order_key(l[i]) == kth;
    const u64 first = block_exclusive_scan(ties, sm.red);
    const size_t slot = size_t(row) * gridDim.x + blockIdx.x;
    int32_t* mine = s.tie_ids + slot * kMaxTopLogprobs;
    u64 rank = first;
    for (int64_t i = lo; i < hi && rank < u64(n); ++i)
        if (float_order_key(l[i]) == kth) mine[rank++] = int32_t(i);
    if (threadIdx.x == kThreads - 1) s.tie_count[slot] = int32_t(first + ties < u64(n) ? first + ties : u64(n));
    if (!last_block_of_row(&st->done, sm.last)) return;

    const int above = __ldcg(&st->above_count);
    if (int(threadIdx.x) < above) {
        const int32_t id = __ldcg(s.above_ids + row * kMaxTopLogprobs + threadIdx.x);
        sm.ids[threadIdx.x] = id, sm.vals[threadIdx.x] = l[id];
    }
    // Chunk ch (thread ch) places its ties after the earlier chunks' (gridDim.x <= kThreads).
    const int ch = int(threadIdx.x);
    const int count = ch < int(gridDim.x) ? __ldcg(s.tie_count + size_t(row) * gridDim.x + ch) : 0;
    const int before = int(block_exclusive_scan(u64(count), sm.red));
    for (int j = 0; j < count && above + before + j < n; ++j) {
        const int32_t id = __ldcg(s.tie_ids + (size_t(row) * gridDim.x + ch) * kMaxTopLogprobs + j);
        sm.ids[above + before + j] = id, sm.vals[above + before + j] = l[id];
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        st->above_count = 0;
        write_top_logprobs(sm.ids, sm.vals, n, p.lse[row], p.top_ids + int64_t(row) * kMaxTopLogprobs,
                           p.top_logprobs + int64_t(row) * kMaxTopLogprobs);
    }
}

// ---- thresholds out -----------------------------------------------------------------------------

__global__ void thresholds_out_kernel(SamplingLaunch p, ChunkedScratch s) {
    const int row = int(blockIdx.x * blockDim.x + threadIdx.x);
    if (row >= p.R) return;
    const SampleRow r = p.rows[row];
    if (r.greedy()) return;
    const RowSelect& st = s.rows[row];
    float tau = -INFINITY;
    if (has_top_k(r, p.V)) tau = st.tau_k;
    if (has_top_p(r)) tau = fmaxf(tau, st.tau_p);
    p.draw_thresholds[row] = RowThresholds{inv_temperature(r), float_from_order_key(st.max_key), tau};
}

size_t align16(size_t n) { return (n + 15) / 16 * 16; }

template <Select S>
void launch_rounds(const SamplingLaunch& p, const ChunkedScratch& s, cudaStream_t stream) {
    for (int round = 0; round < kRounds; ++round) {
        ptx::launch_kernel(select_round_kernel<S>, dim3(unsigned(p.chunks), unsigned(p.R)), dim3(kThreads), 0, stream,
                           p, s, round);
        QS_CUDA_CHECK_LAUNCH();
    }
}

}  // namespace

size_t chunked_scratch_bytes(int64_t R, int32_t chunks) {
    const size_t rc = size_t(R) * size_t(chunks);
    return align16(size_t(R) * sizeof(RowSelect)) + size_t(R) * kMaxBins * sizeof(u64) + align16(rc * sizeof(double)) +
           align16(rc * kMaxTopLogprobs * 4) + align16(rc * 4) + align16(size_t(R) * kMaxTopLogprobs * 4);
}

ChunkedScratch carve_chunked_scratch(void* base, int64_t R, int32_t chunks) {
    const size_t rc = size_t(R) * size_t(chunks);
    char* at = static_cast<char*>(base);
    ChunkedScratch s;
    s.rows = reinterpret_cast<RowSelect*>(at);
    at += align16(size_t(R) * sizeof(RowSelect));
    s.hist = reinterpret_cast<u64*>(at);
    at += size_t(R) * kMaxBins * sizeof(u64);
    s.zeroed_bytes = size_t(at - static_cast<char*>(base));
    s.chunk_sum = reinterpret_cast<double*>(at);
    at += align16(rc * sizeof(double));
    s.tie_ids = reinterpret_cast<int32_t*>(at);
    at += align16(rc * kMaxTopLogprobs * 4);
    s.tie_count = reinterpret_cast<int32_t*>(at);
    at += align16(rc * 4);
    s.above_ids = reinterpret_cast<int32_t*>(at);
    return s;
}

void launch_chunked_stats(const SamplingLaunch& p, const ChunkedScratch& s, cudaStream_t stream) {
    QS_CHECK_MSG(p.chunks > 1 && p.chunks <= kThreads, "sampling: chunked statistics need 2..512 chunks");
    const dim3 grid(unsigned(p.chunks), unsigned(p.R));
    ptx::launch_kernel(chunk_max_kernel<true>, grid, dim3(kThreads), 0, stream, p, s);
    QS_CUDA_CHECK_LAUNCH();
    launch_rounds<Select::kStats>(p, s, stream);
    ptx::launch_kernel(top_gather_kernel, grid, dim3(kThreads), 0, stream, p, s);
    QS_CUDA_CHECK_LAUNCH();
}

void launch_chunked_thresholds(const SamplingLaunch& p, const SamplingNeeds& needs, const ChunkedScratch& s,
                               cudaStream_t stream) {
    QS_CHECK_MSG(p.chunks > 1 && p.chunks <= kThreads, "sampling: chunked thresholds need 2..512 chunks");
    const dim3 grid(unsigned(p.chunks), unsigned(p.R));
    ptx::launch_kernel(chunk_max_kernel<false>, grid, dim3(kThreads), 0, stream, p, s);
    QS_CUDA_CHECK_LAUNCH();
    if (needs.top_k) launch_rounds<Select::kTopK>(p, s, stream);
    if (needs.top_p) launch_rounds<Select::kTopP>(p, s, stream);
    ptx::launch_kernel(thresholds_out_kernel, dim3(unsigned((p.R + 127) / 128)), dim3(128), 0, stream, p, s);
    QS_CUDA_CHECK_LAUNCH();
}

}  // namespace qs::cuda

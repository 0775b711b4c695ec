// The GPU sampler (see sampling_kernels.h; the maths: backend/sampling.h; CPU reference:
// backend/cpu/cpu_sampling.cpp). Here: the one-block-per-row kernels (every pass over a row reads
// it with a stride of kThreads, every reduction in a fixed order, so a row's result depends only on
// its own inputs), the draw's per-chunk candidates, and the launcher, which sends the statistics
// and thresholds of batches of few rows to sampling_chunked.cu instead.
#include "backend/cuda/sampling_kernels.h"

#include <algorithm>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/device_batch.h"
#include "backend/cuda/device_limits.h"
#include "backend/cuda/ptx_helpers.cuh"
#include "backend/cuda/sampling_block.cuh"
#include "backend/cuda/sampling_chunked.h"
#include "backend/sampling_math.h"

namespace qs::cuda {

namespace {

using namespace sampling;
constexpr int kThreads = kSamplingThreads;

// Radix selection by one block: walking the eligible elements in descending key order and summing
// their weights, the key of the element at which the sum first reaches the target. The target is
// `target`, or (fraction > 0) fraction × the total weight. `key_weight(i, key, weight)` returns
// whether element i takes part. Zero weights never move the sum and are skipped.
template <class KeyWeight>
__device__ uint32_t radix_select(int64_t V, KeyWeight key_weight, double target, double fraction, SelectSmem& sm,
                                 ReduceSmem& red) {
    uint32_t prefix = 0;
    double above = 0.0;
    for (int round = 0; round < kRounds; ++round) {
        const int shift = digit_shift(round), bins = 1 << digit_width(round), fixed = digits_fixed_before(round);
        for (int b = threadIdx.x; b < bins; b += kThreads) sm.hist[b] = 0;
        __syncthreads();
        for (int64_t i = threadIdx.x; i < V; i += kThreads) {
            uint32_t key;
            u64 w;
            if (!key_weight(i, key, w) || w == 0) continue;
            if (fixed > 0 && (key >> (32 - fixed)) != (prefix >> (32 - fixed))) continue;
            atomicAdd(&sm.hist[(key >> shift) & uint32_t(bins - 1)], w);
        }
        __syncthreads();
        const BucketPick pick = pick_digit(bins, above, target, fraction, round == 0, sm, red);
        prefix |= pick.digit << shift;
        above = pick.above;
    }
    return prefix;
}

// ---- 1. raw logprob statistics --------------------------------------------------------------

struct StatsSmem {
    ReduceSmem red;
    SelectSmem sel;
    int32_t count;
    int32_t ids[kMaxTopLogprobs];
    float vals[kMaxTopLogprobs];
};

__global__ void __launch_bounds__(kThreads) logprob_stats_kernel(SamplingLaunch p) {
    __shared__ StatsSmem sm;
    const SampleRow r = p.rows[blockIdx.x];
    if (r.num_top_logprobs < 0) return;
    const float* l = p.logits + int64_t(r.logits_row) * p.V;
    float mx = -INFINITY;
    for (int64_t i = threadIdx.x; i < p.V; i += kThreads) mx = fmaxf(mx, l[i]);
    mx = block_max(mx, sm.red);
    double sum = 0.0;
    for (int64_t i = threadIdx.x; i < p.V; i += kThreads) sum += double(expf(l[i] - mx));
    sum = block_sum(sum, sm.red);
    const float lse = float(double(mx) + log(sum));
    if (threadIdx.x == 0) p.lse[blockIdx.x] = lse;
    const int32_t n = r.num_top_logprobs;
    if (n == 0) return;
    // The key of the n-th largest raw logit; then everything above it, and the lowest ids of
    // the ties at it.
    const uint32_t kth = radix_select(
        p.V,
        [&](int64_t i, uint32_t& key, u64& w) {
            key = float_order_key(l[i]);
            w = 1;
            return true;
        },
        double(n), 0.0, sm.sel, sm.red);
    if (threadIdx.x == 0) sm.count = 0;
    __syncthreads();
    for (int64_t i = threadIdx.x; i < p.V; i += kThreads)
        if (float_order_key(l[i]) > kth) {
            const int32_t at = atomicAdd(&sm.count, 1);
            sm.ids[at] = int32_t(i), sm.vals[at] = l[i];
        }
    __syncthreads();
    const int32_t above = sm.count;
    const int64_t chunk = (p.V + kThreads - 1) / kThreads;  // contiguous ids per thread: ranks by id
    const int64_t lo = threadIdx.x * chunk < p.V ? threadIdx.x * chunk : p.V;
    const int64_t hi = lo + chunk < p.V ? lo + chunk : p.V;
    u64 ties = 0;
    for (int64_t i = lo; i < hi; ++i) ties += float_order_key(l[i]) == kth;
    int64_t rank = int64_t(block_exclusive_scan(ties, sm.red));
    for (int64_t i = lo; i < hi && above + rank < n; ++i)
        if (float_order_key(l[i]) == kth) {
            sm.ids[above + rank] = int32_t(i), sm.vals[above + rank] = l[i];
            ++rank;
        }
    __syncthreads();
    if (threadIdx.x == 0)
        write_top_logprobs(sm.ids, sm.vals, n, lse, p.top_ids + int64_t(blockIdx.x) * kMaxTopLogprobs,
                           p.top_logprobs + int64_t(blockIdx.x) * kMaxTopLogprobs);
}

// ---- 2. adjustments ----------------------------------------------------------------------------


__device__ int32_t history_token(const SamplingLaunch& p, const SampleRow& r, int32_t pos) {
    const int32_t page = p.block_tables[r.table_begin + pos / p.block_size];
    return p.token_pages[int64_t(page) * p.block_size + pos % p.block_size];
}

// Dynamic shared memory: three bitmaps of ceil(V / 32) words: prompt tokens, output tokens,
// biased tokens (only rows with a bias or penalties use them).
__global__ void __launch_bounds__(kThreads) adjust_kernel(SamplingLaunch p) {
    uint32_t* bits = reinterpret_cast<uint32_t*>(ptx::dynamic_smem());
    const SampleRow r = p.rows[blockIdx.x];
    if (!r.adjusts()) return;
    const bool pen = r.has_penalties();
    float* l = p.logits + int64_t(r.logits_row) * p.V;
    if (pen || r.adjust_end > r.adjust_begin) {
        const int32_t W = int32_t((p.V + 31) / 32);
        uint32_t* prompt_bits = bits;
        uint32_t* out_bits = bits + W;
        uint32_t* bias_bits = bits + 2 * W;
        for (int32_t w = threadIdx.x; w < 3 * W; w += kThreads) bits[w] = 0;
        __syncthreads();
        if (pen)
            for (int32_t pos = threadIdx.x; pos < r.history_len; pos += kThreads) {
                const int32_t t = history_token(p, r, pos);
                if (t < 0 || t >= p.V) continue;
                atomicOr(&(pos < r.num_prompt ? prompt_bits : out_bits)[t >> 5], 1u << (t & 31));
            }
        for (int32_t a = r.adjust_begin + threadIdx.x; a < r.adjust_end; a += kThreads) {
            const int32_t t = p.adjust[a].token;
            atomicOr(&bias_bits[t >> 5], 1u << (t & 31));
        }
        __syncthreads();
        const bool rep = r.repetition_penalty != 1.0f;
        const int32_t list = p.raw_list[blockIdx.x];
        if (list >= 0) {
            // Save every raw value this row is about to overwrite (each token once).
            auto save = [&](int32_t t) {
                const int32_t at = atomicAdd(&p.list_count[list], 1);
                if (at < p.list_cap[list]) p.saved[p.list_begin[list] + at] = SavedLogit{t, l[t]};
            };
            for (int32_t a = r.adjust_begin + threadIdx.x; a < r.adjust_end; a += kThreads) save(p.adjust[a].token);
            if (pen)
                for (int32_t w = threadIdx.x; w < W; w += kThreads) {
                    uint32_t m = (rep ? prompt_bits[w] | out_bits[w] : out_bits[w]) & ~bias_bits[w];
                    for (; m; m &= m - 1) save(w * 32 + __ffs(int(m)) - 1);
                }
            __syncthreads();
        }
        for (int32_t a = r.adjust_begin + threadIdx.x; a < r.adjust_end; a += kThreads) {
            const TokenAdjust e = p.adjust[a];
            l[e.token] = (isinf(e.bias) && e.bias < 0) ? -INFINITY : l[e.token] + e.bias;
        }
        __syncthreads();
        if (pen) {
            for (int32_t w = threadIdx.x; w < W; w += kThreads) {
                const uint32_t seen = rep ? prompt_bits[w] | out_bits[w] : out_bits[w];
                for (uint32_t m = seen; m; m &= m - 1) {
                    const int32_t t = w * 32 + __ffs(int(m)) - 1;
                    float v = l[t];
                    if (rep) v = v > 0 ? v / r.repetition_penalty : v * r.repetition_penalty;
                    if (out_bits[w] >> (t & 31) & 1) v -= r.presence_penalty;
                    l[t] = v;
                }
            }
            __syncthreads();
            // One subtraction per output occurrence, as the specification does: every update is
            // the same "v - f", so the order of the atomics cannot change the result.
            if (r.frequency_penalty != 0.0f)
                for (int32_t pos = r.num_prompt + threadIdx.x; pos < r.history_len; pos += kThreads) {
                    const int32_t t = history_token(p, r, pos);
                    if (t >= 0 && t < p.V) atomicAdd(&l[t], -r.frequency_penalty);
                }
            __syncthreads();
        }
    }
    // The grammar's bitmask, last (-inf stays -inf under everything above). Consecutive threads
    // take consecutive tokens: a warp reads one mask word and writes 32 adjacent logits.
    if (r.bitmask_row >= 0) {
        const uint32_t* mask = p.bitmask + int64_t(r.bitmask_row) * bitmask_words(p.V);
        for (int64_t i = threadIdx.x; i < p.V; i += kThreads)
            if (!bitmask_allows(mask, i)) l[i] = -INFINITY;
    }
}

// ---- 3. the draw ------------------------------------------------------------------------------

// The draw in three launches, so that few rows still spread over the SMs: (a) per row, the
// thresholds (max, top-k, top-p; nothing for greedy rows); (b) per (row, chunk of the
// vocabulary), the best candidate of the chunk; (c) per row, the best of the chunks, the verdict
// on the draft and the raw logprob.
struct ThresholdSmem {
    ReduceSmem red;
    SelectSmem sel;
};

__global__ void __launch_bounds__(kThreads) threshold_kernel(SamplingLaunch p, RowThresholds* out) {
    __shared__ ThresholdSmem sm;
    const SampleRow r = p.rows[blockIdx.x];
    if (r.greedy()) return;
    const float* l = p.logits + int64_t(r.logits_row) * p.V;
    const float inv_t = float(1.0 / double(r.temperature));
    float m = -INFINITY;
    for (int64_t i = threadIdx.x; i < p.V; i += kThreads) m = fmaxf(m, l[i] * inv_t);
    m = block_max(m, sm.red);
    float tau = -INFINITY;
    if (r.top_k > 0 && r.top_k < p.V) {
        const uint32_t k = radix_select(
            p.V,
            [&](int64_t i, uint32_t& key, u64& w) {
                key = float_order_key(l[i] * inv_t);
                w = 1;
                return true;
            },
            double(r.top_k), 0.0, sm.sel, sm.red);
        tau = float_from_order_key(k);
    }
    if (r.top_p < 1.0f) {
        const float tau_k = tau;
        const uint32_t k = radix_select(
            p.V,
            [&](int64_t i, uint32_t& key, u64& w) {
                const float s = l[i] * inv_t;
                if (!(s >= tau_k)) return false;
                key = float_order_key(s);
                w = sampling_weight_fixed(s, m);
                return true;
            },
            0.0, double(r.top_p), sm.sel, sm.red);
        tau = fmaxf(tau, float_from_order_key(k));
    }
    if (threadIdx.x == 0) out[blockIdx.x] = RowThresholds{inv_t, m, tau};
}

struct CandidateSmem {
    double score[kWarps];
    int32_t index[kWarps];
};

// Grid (chunks, rows): chunk c of row r covers [c·chunk, (c+1)·chunk) of the vocabulary.
__global__ void __launch_bounds__(kThreads) candidate_kernel(SamplingLaunch p, const RowThresholds* th,
                                                             int64_t chunk, Candidate* out) {
    __shared__ CandidateSmem sm;
    const SampleRow r = p.rows[blockIdx.y];
    const float* l = p.logits + int64_t(r.logits_row) * p.V;
    const int64_t lo = int64_t(blockIdx.x) * chunk, hi = lo + chunk < p.V ? lo + chunk : p.V;
    double best = -INFINITY;
    int32_t best_i = -1;
    if (r.greedy()) {
        for (int64_t i = lo + threadIdx.x; i < hi; i += kThreads) {
            const float v = l[i];
            if (best_i < 0 || v > best) best = v, best_i = int32_t(i);  // ascending i: the first maximum
        }
    } else {
        const RowThresholds t = th[blockIdx.y];
        for (int64_t i = lo + threadIdx.x; i < hi; i += kThreads) {
            const float s = l[i] * t.inv_t;
            if (!(s >= t.tau) || !sampling_min_p_keeps(s, t.m, r.min_p)) continue;
            const double u = sampling_uniform(r.seed, r.draw, uint32_t(i));
            // A float estimate first (fast logs, error < 1e-2 for u < 0.999): only a candidate
            // that might beat this thread's best pays for the exact double score, so the result
            // is the exact argmax.
            if (best_i >= 0 && u < 0.999) {
                const float g = -__logf(-__logf(float(u)));
                if (double(s) + double(g) + 0.05 < best) continue;
            }
            const double score = double(s) + sampling_gumbel_of(u);
            if (best_i < 0 || score > best) best = score, best_i = int32_t(i);
        }
    }
    const int32_t index = block_argmax(best, best_i, sm.score, sm.index);
    if (threadIdx.x == 0) out[int64_t(blockIdx.y) * gridDim.x + blockIdx.x] = Candidate{best, index};
}

struct FinishSmem {
    double score[kWarps];
    int32_t index[kWarps];
    float raw;
};

__global__ void __launch_bounds__(kThreads) finish_kernel(SamplingLaunch p, const Candidate* cand, int chunks) {
    __shared__ FinishSmem sm;
    const SampleRow r = p.rows[blockIdx.x];
    const float* l = p.logits + int64_t(r.logits_row) * p.V;
    double best = -INFINITY;
    int32_t best_i = -1;
    for (int c = threadIdx.x; c < chunks; c += kThreads) {
        const Candidate k = cand[int64_t(blockIdx.x) * chunks + c];
        if (k.index >= 0 && (best_i < 0 || k.score > best || (k.score == best && k.index < best_i)))
            best = k.score, best_i = k.index;
    }
    int32_t token = block_argmax(best, best_i, sm.score, sm.index);
    if (token < 0) token = 0;  // every logit -inf: nothing to draw (the CPU specification aborts)
    if (r.num_top_logprobs >= 0) {
        // The raw logit of the token: saved by the adjustment that overwrote it, else in place.
        if (threadIdx.x == 0) sm.raw = l[token];
        __syncthreads();
        const int32_t list = p.raw_list[blockIdx.x];
        if (list >= 0) {
            const int32_t n = min(p.list_count[list], p.list_cap[list]);
            for (int32_t j = threadIdx.x; j < n; j += kThreads) {
                const SavedLogit s = p.saved[p.list_begin[list] + j];
                if (s.token == token) sm.raw = s.raw;  // tokens are unique in a list
            }
        }
        __syncthreads();
        if (threadIdx.x == 0) p.logprob[blockIdx.x] = sm.raw - p.lse[blockIdx.x];
    }
    if (threadIdx.x == 0) {
        p.token[blockIdx.x] = token;
        p.accepted[blockIdx.x] = r.draft >= 0 && token == r.draft;
    }
}

__global__ void store_token_ids_kernel(DeviceBatch b, int32_t* token_pages, int32_t block_size) {
    const int32_t r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= b.num_tokens) return;
    const DeviceSeq s = b.seqs[b.row_seq[r]];
    const int32_t pos = b.positions[r];
    const int32_t page = b.block_tables[s.block_table_begin + pos / block_size];
    token_pages[int64_t(page) * block_size + pos % block_size] = b.token_ids[r];
}

}  // namespace

int32_t sampling_chunks(int64_t R, int64_t V, int32_t forced) {
    int64_t c = forced > 0 ? forced
                           : std::min<int64_t>(2 * sm_count() / std::max<int64_t>(R, 1), (V + 4095) / 4096);
    c = std::clamp<int64_t>(c, 1, std::min<int64_t>(V, kThreads));
    const int64_t chunk = (V + c - 1) / c;
    return int32_t((V + chunk - 1) / chunk);  // no empty chunk
}

size_t sampling_scratch_bytes(int64_t R, int64_t V, int32_t chunks, bool chunked_select) {
    (void)V;
    const size_t draw = (size_t(R) * sizeof(RowThresholds) + 15) / 16 * 16 + size_t(R) * size_t(chunks) * sizeof(Candidate);
    return (draw + 15) / 16 * 16 + (chunked_select && chunks > 1 ? chunked_scratch_bytes(R, chunks) : 0) + 256;
}

void set_sampling_scratch(SamplingLaunch& p, void* scratch) {
    char* at = static_cast<char*>(scratch);
    p.draw_thresholds = reinterpret_cast<RowThresholds*>(at);
    at += (size_t(p.R) * sizeof(RowThresholds) + 15) / 16 * 16;
    p.draw_candidates = reinterpret_cast<Candidate*>(at);
    at += (size_t(p.R) * size_t(p.chunks) * sizeof(Candidate) + 15) / 16 * 16;
    p.chunked_scratch = p.chunked_select && p.chunks > 1 ? at : nullptr;
}

SamplingNeeds sampling_needs(const SampleRow* rows, int64_t R, int64_t V) {
    SamplingNeeds n;
    for (int64_t i = 0; i < R; ++i) {
        const SampleRow& r = rows[i];
        n.logprobs |= r.num_top_logprobs >= 0;
        n.adjust |= r.adjusts();
        if (r.greedy()) continue;
        n.sampled = true;
        n.top_k |= r.top_k > 0 && r.top_k < V;
        n.top_p |= r.top_p < 1.0f;
    }
    return n;
}

RawValueLists raw_value_lists(const SamplingBatch& batch, int32_t num_logits_rows, const SamplingNeeds& needs) {
    RawValueLists lists;
    lists.row_list.assign(batch.rows.size(), -1);
    if (!needs.logprobs || !needs.adjust) return lists;
    std::vector<uint8_t> wanted(size_t(num_logits_rows), 0);
    std::vector<int32_t> list_of(size_t(num_logits_rows), -1);
    for (const SampleRow& r : batch.rows) wanted[size_t(r.logits_row)] |= r.num_top_logprobs >= 0;
    for (const SampleRow& a : batch.rows) {
        if (!a.adjusts() || !wanted[size_t(a.logits_row)]) continue;
        QS_CHECK_MSG(list_of[size_t(a.logits_row)] < 0, "sampling: two rows adjust the same logits row");
        list_of[size_t(a.logits_row)] = int32_t(lists.begin.size());
        lists.begin.push_back(lists.begin.empty() ? 0 : lists.begin.back() + lists.cap.back());
        lists.cap.push_back((a.adjust_end - a.adjust_begin) + (a.has_penalties() ? a.history_len : 0));
    }
    for (size_t i = 0; i < batch.rows.size(); ++i) lists.row_list[i] = list_of[size_t(batch.rows[i].logits_row)];
    return lists;
}

void launch_sampling(const SamplingLaunch& p, const SamplingNeeds& needs, cudaStream_t stream) {
    if (p.R == 0) return;
    const bool chunked_select = p.chunked_select && p.chunks > 1;
    QS_CHECK_MSG(p.chunks >= 1 && p.chunks <= kThreads && chunked_select == (p.chunked_scratch != nullptr),
                 "sampling: chunks and scratch disagree");
    ChunkedScratch chunked;
    if (chunked_select && (needs.logprobs || needs.sampled)) {
        chunked = carve_chunked_scratch(p.chunked_scratch, p.R, p.chunks);
        QS_CUDA_CHECK(cudaMemsetAsync(p.chunked_scratch, 0, chunked.zeroed_bytes, stream));
    }
    if (needs.logprobs) {
        if (chunked_select) {
            launch_chunked_stats(p, chunked, stream);
        } else {
            ptx::launch_kernel(logprob_stats_kernel, dim3(unsigned(p.R)), dim3(kThreads), 0, stream, p);
            QS_CUDA_CHECK_LAUNCH();
        }
    }
    if (needs.adjust) {
        const size_t smem = size_t(3 * ((p.V + 31) / 32)) * sizeof(uint32_t);
        allow_dynamic_smem<adjust_kernel>(smem);
        ptx::launch_kernel(adjust_kernel, dim3(unsigned(p.R)), dim3(kThreads), smem, stream, p);
        QS_CUDA_CHECK_LAUNCH();
    }
    if (needs.sampled) {
        if (chunked_select) {
            launch_chunked_thresholds(p, needs, chunked, stream);
        } else {
            ptx::launch_kernel(threshold_kernel, dim3(unsigned(p.R)), dim3(kThreads), 0, stream, p, p.draw_thresholds);
            QS_CUDA_CHECK_LAUNCH();
        }
    }
    const int64_t chunk = (p.V + p.chunks - 1) / p.chunks;
    ptx::launch_kernel(candidate_kernel, dim3(unsigned(p.chunks), unsigned(p.R)), dim3(kThreads), 0, stream, p,
                       static_cast<const RowThresholds*>(p.draw_thresholds), chunk, p.draw_candidates);
    QS_CUDA_CHECK_LAUNCH();
    ptx::launch_kernel(finish_kernel, dim3(unsigned(p.R)), dim3(kThreads), 0, stream, p,
                       static_cast<const Candidate*>(p.draw_candidates), int(p.chunks));
    QS_CUDA_CHECK_LAUNCH();
}

void launch_store_token_ids(const DeviceBatch& batch, int32_t* token_pages, int32_t block_size, cudaStream_t stream) {
    if (batch.num_tokens == 0) return;
    ptx::launch_kernel(store_token_ids_kernel, dim3(unsigned((batch.num_tokens + 255) / 256)), dim3(256), 0, stream, batch,
                       token_pages, block_size);
    QS_CUDA_CHECK_LAUNCH();
}

}  // namespace qs::cuda

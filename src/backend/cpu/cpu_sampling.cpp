// The sampler's specification (backend/sampling.h, steps 1-5), written as plainly as possible:
// the CUDA kernels are checked against it. Engine thread.
#include <algorithm>
#include <cmath>
#include <numeric>

#include "backend/cpu/cpu_ops.h"
#include "core/check.h"
#include "backend/sampling_math.h"

namespace qs {

namespace cpu {

namespace {

// Step 1: log Σ exp(l) in double, and the n largest raw logits (ties: lower id first).
float log_sum_exp(const float* l, int64_t V) {
    float mx = -INFINITY;
    for (int64_t i = 0; i < V; ++i) mx = std::max(mx, l[i]);
    double sum = 0.0;
    for (int64_t i = 0; i < V; ++i) sum += std::exp(double(l[i]) - double(mx));
    return float(double(mx) + std::log(sum));
}

void top_logprobs(const float* l, int64_t V, float lse, int32_t n, int32_t* ids, float* lps) {
    std::vector<int32_t> idx(static_cast<size_t>(V));
    std::iota(idx.begin(), idx.end(), 0);
    const size_t k = std::min<size_t>(size_t(n), idx.size());
    std::partial_sort(idx.begin(), idx.begin() + ptrdiff_t(k), idx.end(),
                      [&](int32_t a, int32_t b) { return l[a] > l[b] || (l[a] == l[b] && a < b); });
    for (size_t i = 0; i < k; ++i) {
        ids[i] = idx[i];
        lps[i] = l[idx[i]] - lse;
    }
}

// Step 2's penalties over the history read from the token pages.
void apply_penalties(float* l, int64_t V, const SampleRow& r, const SamplingBatch& b, const int32_t* token_pages,
                     int64_t block_size) {
    QS_CHECK(token_pages != nullptr);
    std::vector<int32_t> output_count(static_cast<size_t>(V), 0);
    std::vector<uint8_t> in_prompt(static_cast<size_t>(V), 0);
    for (int32_t p = 0; p < r.history_len; ++p) {
        const int32_t page = b.block_tables[size_t(r.table_begin + p / block_size)];
        const int32_t t = token_pages[int64_t(page) * block_size + p % block_size];
        QS_CHECK(t >= 0 && t < V);
        if (p < r.num_prompt) in_prompt[size_t(t)] = 1;
        else ++output_count[size_t(t)];
    }
    for (int64_t t = 0; t < V; ++t) {
        const int32_t n = output_count[size_t(t)];
        if (r.repetition_penalty != 1.0f && (n > 0 || in_prompt[size_t(t)]))
            l[t] = l[t] > 0 ? l[t] / r.repetition_penalty : l[t] * r.repetition_penalty;
        if (n > 0) {
            l[t] -= r.presence_penalty;
            for (int32_t k = 0; k < n; ++k) l[t] -= r.frequency_penalty;
        }
    }
}

// Step 2, last: tokens outside the row's bitmask are banned.
void apply_bitmask(float* l, int64_t V, const SampleRow& r, const SamplingBatch& b) {
    const int64_t W = bitmask_words(V);
    QS_CHECK(r.bitmask_row >= 0 && size_t((int64_t(r.bitmask_row) + 1) * W) <= b.bitmask.size());
    const uint32_t* mask = b.bitmask.data() + int64_t(r.bitmask_row) * W;
    for (int64_t t = 0; t < V; ++t)
        if (!bitmask_allows(mask, t)) l[t] = -INFINITY;
}

// Step 2: logit_bias / bans, then the penalties, then the bitmask.
void adjust_row(float* l, int64_t V, const SampleRow& r, const SamplingBatch& b, const int32_t* token_pages,
                int64_t block_size) {
    for (int32_t a = r.adjust_begin; a < r.adjust_end; ++a) {
        const TokenAdjust& e = b.adjust[size_t(a)];
        QS_CHECK(e.token >= 0 && e.token < V);
        l[e.token] = std::isinf(e.bias) && e.bias < 0 ? -INFINITY : l[e.token] + e.bias;
    }
    if (r.has_penalties()) apply_penalties(l, V, r, b, token_pages, block_size);
    if (r.bitmask_row >= 0) apply_bitmask(l, V, r, b);
}

int32_t argmax_row(const float* l, int64_t V) {
    int64_t best = 0;
    for (int64_t i = 1; i < V; ++i)
        if (l[i] > l[best]) best = i;
    return int32_t(best);
}

// Step 4.
int32_t draw_row(const float* l, int64_t V, const SampleRow& r) {
    const float inv_t = float(1.0 / double(r.temperature));
    std::vector<float> s(static_cast<size_t>(V));
    float m = -INFINITY;
    for (int64_t i = 0; i < V; ++i) m = std::max(m, s[size_t(i)] = l[i] * inv_t);
    // The values in descending order (only when a threshold needs them): the top-k and top-p
    // thresholds are values of s.
    std::vector<int32_t> order;
    if ((r.top_k > 0 && r.top_k < V) || r.top_p < 1.0f) {
        order.resize(static_cast<size_t>(V));
        std::iota(order.begin(), order.end(), 0);
        std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return s[size_t(a)] > s[size_t(b)]; });
    }
    float tau = -INFINITY;
    size_t in_k = order.size();  // elements with s >= tau_k
    if (r.top_k > 0 && r.top_k < V) {
        tau = s[size_t(order[size_t(r.top_k - 1)])];
        while (in_k > 0 && s[size_t(order[in_k - 1])] < tau) --in_k;
    }
    if (r.top_p < 1.0f) {
        uint64_t total = 0;
        for (size_t j = 0; j < in_k; ++j) total += sampling_weight_fixed(s[size_t(order[j])], m);
        const double target = double(r.top_p) * double(total);
        uint64_t cum = 0;
        for (size_t j = 0; j < in_k;) {
            // All elements equal to this value enter together (ties at the boundary are kept).
            const float v = s[size_t(order[j])];
            for (; j < in_k && s[size_t(order[j])] == v; ++j) cum += sampling_weight_fixed(v, m);
            if (double(cum) >= target) {
                tau = std::max(tau, v);
                break;
            }
        }
    }
    int32_t best = -1;
    double best_score = -INFINITY;
    for (int64_t i = 0; i < V; ++i) {
        const float si = s[size_t(i)];
        if (!(si >= tau) || !sampling_min_p_keeps(si, m, r.min_p)) continue;
        const double score = double(si) + sampling_gumbel(r.seed, r.draw, uint32_t(i));
        if (best < 0 || score > best_score) best = int32_t(i), best_score = score;
    }
    QS_CHECK_MSG(best >= 0, "sampling: no token is left to draw (every logit is -inf)");
    return best;
}

}  // namespace

void sample_rows(float* logits, int64_t V, const SamplingBatch& b, const int32_t* token_pages, int64_t block_size,
                 SampleOutput& out) {
    const size_t R = b.rows.size();
    out.resize(R);
    // Step 1 before any row is adjusted (siblings share a logits row).
    std::vector<std::vector<float>> raw(R);
    std::vector<float> lse(R, 0.0f);
    for (size_t i = 0; i < R; ++i) {
        const SampleRow& r = b.rows[i];
        if (r.num_top_logprobs < 0) continue;
        QS_CHECK(r.num_top_logprobs <= kMaxTopLogprobs);
        const float* l = logits + int64_t(r.logits_row) * V;
        lse[i] = log_sum_exp(l, V);
        top_logprobs(l, V, lse[i], r.num_top_logprobs, &out.top_ids[i * kMaxTopLogprobs],
                     &out.top_logprobs[i * kMaxTopLogprobs]);
        raw[i].assign(l, l + V);
    }
    for (const SampleRow& r : b.rows)
        if (r.adjusts()) adjust_row(logits + int64_t(r.logits_row) * V, V, r, b, token_pages, block_size);
    for (size_t i = 0; i < R; ++i) {
        const SampleRow& r = b.rows[i];
        const float* l = logits + int64_t(r.logits_row) * V;
        const int32_t token = r.greedy() ? argmax_row(l, V) : draw_row(l, V, r);
        out.token[i] = token;
        out.accepted[i] = r.draft >= 0 && token == r.draft;
        out.logprob[i] = r.num_top_logprobs >= 0 ? raw[i][size_t(token)] - lse[i] : 0.0f;
    }
}

}  // namespace cpu

void CpuOps::sample(float* logits, int64_t V, const SamplingBatch& batch, ModelCache& cache, SampleOutput& out) {
    cpu::sample_rows(logits, V, batch, cache.token_pages(), cache.geometry().block_size, out);
}

}  // namespace qs

// The sampler on the GPU: the contract of backend/sampling.h, checked against its CPU
// specification (backend/cpu/cpu_sampling.cpp) by tests/gpu and bench/kernels/sampling_lab.cu.
// Three launches, one block per SampleRow each, so the logits never leave the device:
//  1. logprob_stats: rows asking for logprobs: lse of the raw row and its top N (radix select of
//     the N-th largest key, then the ties at the boundary by lowest id);
//  2. adjust: rows with logit_bias / bans / penalties / a grammar bitmask change their logits row
//     in place, first saving the raw values the bias and penalties overwrite when a row of that
//     logits row wants logprobs (the bitmask's -inf need no saving: the drawn token is allowed);
//  3. draw: per row the thresholds: max → top-k / top-p (radix select over 12/12/8-bit digits
//     of an order-preserving key, weights exp(s - m) in 2^-32 fixed point; nothing for greedy
//     rows); per (row, vocabulary chunk) the best candidate: the argmax, or Gumbel-max over the
//     kept set (chunks spread few rows over the SMs); per row the best chunk, the verdict on a
//     draft and the drawn token's raw logprob.
// With few rows (fewer than SMs: sampling_chunks > 1) and SamplingLaunch::chunked_select, the
// statistics of 1 and the thresholds of 3 are spread over the same vocabulary chunks too
// (sampling_chunked.cu): a launch per radix round,
// whose last block per row picks the digit from the summed histogram. The histograms hold integer
// weights, so the selected keys, and with them every token, top id and verdict, are the one-block
// path's; only the lse's double sum runs in another order.
// Launchers enqueue on `stream` and never sync.
#pragma once

#include <cstdint>
#include <vector>

#include <cuda_runtime.h>

#include "backend/sampling.h"

namespace qs::cuda {

// A raw logit saved before an adjustment overwrote it.
struct SavedLogit {
    int32_t token;
    float raw;
};

// The draw's scratch: per row its thresholds (s = l · inv_t is kept when s >= tau and min-p
// holds against the max m), and per (row, vocabulary chunk) the chunk's best candidate.
struct RowThresholds {
    float inv_t, m, tau;
};
struct Candidate {
    double score;
    int32_t index;  // -1: none in the chunk
};

struct SamplingLaunch {
    float* logits = nullptr;              // [*, V], adjusted in place
    int64_t V = 0;
    const SampleRow* rows = nullptr;      // [R]
    int32_t R = 0;
    const TokenAdjust* adjust = nullptr;  // SamplingBatch::adjust
    const int32_t* block_tables = nullptr;
    const uint32_t* bitmask = nullptr;     // SamplingBatch::bitmask, [*, bitmask_words(V)]
    const int32_t* token_pages = nullptr;  // [num_blocks, block_size]
    int32_t block_size = 16;
    // Raw values overwritten by adjustments, per list (one per adjusted logits row that some row
    // wants logprobs of): row i's list is raw_list[i] (-1: none), stored at saved[list_begin[l]...]
    // with list_count[l] entries (zeroed before launch), capacity list_cap[l].
    const int32_t* raw_list = nullptr;     // [R]
    const int32_t* list_begin = nullptr;   // [L]
    const int32_t* list_cap = nullptr;     // [L]
    int32_t* list_count = nullptr;         // [L]
    SavedLogit* saved = nullptr;
    float* lse = nullptr;                  // [R] scratch
    // The draw's scratch, sampling_scratch_bytes(R, V) bytes (the thresholds [R], then the
    // per-chunk candidates [R, chunks]), 16-byte aligned.
    RowThresholds* draw_thresholds = nullptr;
    Candidate* draw_candidates = nullptr;
    // Vocabulary chunks per row of the draw (sampling_chunks); with chunked_select and more than
    // one chunk, the statistics and thresholds over the same chunks too (sampling_chunked.h; its
    // scratch, else null).
    int32_t chunks = 1;
    bool chunked_select = false;
    void* chunked_scratch = nullptr;
    // Outputs, [R] and [R, kMaxTopLogprobs].
    int32_t* token = nullptr;
    int32_t* accepted = nullptr;
    float* logprob = nullptr;
    int32_t* top_ids = nullptr;
    float* top_logprobs = nullptr;
};

// Vocabulary chunks per row for R rows of V logits: enough blocks for two per SM when the rows are
// few, at least 4,096 tokens per chunk. `forced` > 0 (tests, the lab) takes that many, at most V.
int32_t sampling_chunks(int64_t R, int64_t V, int32_t forced = 0);

// Bytes of the draw's scratch for R rows of V logits in `chunks` chunks, the chunked selection's
// included when it runs (chunked_select and chunks > 1).
size_t sampling_scratch_bytes(int64_t R, int64_t V, int32_t chunks, bool chunked_select);

// What the batch's rows ask for, known on the host: which launches run.
struct SamplingNeeds {
    bool logprobs = false;  // some row has num_top_logprobs >= 0
    bool adjust = false;    // some row adjusts its logits row
    bool top_k = false;     // some non-greedy row has 0 < top_k < V
    bool top_p = false;     // some non-greedy row has top_p < 1
    bool sampled = false;   // some row is not greedy
};
SamplingNeeds sampling_needs(const SampleRow* rows, int64_t R, int64_t V);

// The raw-value lists of SamplingLaunch (raw_list, list_begin, list_cap): one per adjusted logits
// row that some row wants logprobs of (siblings share their parent's logits row, so lookups go by
// logits row). Host code.
struct RawValueLists {
    std::vector<int32_t> row_list;  // [R]: the row's list, or -1
    std::vector<int32_t> begin, cap;  // [L]
    size_t saved() const { return begin.empty() ? 0 : size_t(begin.back() + cap.back()); }
};
RawValueLists raw_value_lists(const SamplingBatch& batch, int32_t num_logits_rows, const SamplingNeeds& needs);

// Runs the launches. p.draw_thresholds, p.draw_candidates and p.chunked_scratch lie in one
// region of sampling_scratch_bytes(R, V, p.chunks, p.chunked_select) bytes (set_sampling_scratch).
void set_sampling_scratch(SamplingLaunch& p, void* scratch);
void launch_sampling(const SamplingLaunch& p, const SamplingNeeds& needs, cudaStream_t stream);

// tokens[page(pos), pos % block_size] = token_ids[r] for every row r of the uploaded batch.
struct DeviceBatch;
void launch_store_token_ids(const DeviceBatch& batch, int32_t* token_pages, int32_t block_size, cudaStream_t stream);

}  // namespace qs::cuda

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
// Launchers enqueue on `stream` and never sync.
#pragma once

#include <cstdint>

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
    // Outputs, [R] and [R, kMaxTopLogprobs].
    int32_t* token = nullptr;
    int32_t* accepted = nullptr;
    float* logprob = nullptr;
    int32_t* top_ids = nullptr;
    float* top_logprobs = nullptr;
};

// Bytes of the draw's scratch for R rows of V logits.
size_t sampling_scratch_bytes(int64_t R, int64_t V);

// Runs the launches (logprob statistics and adjustments only when some row needs them).
void launch_sampling(const SamplingLaunch& p, bool any_logprobs, bool any_adjust, cudaStream_t stream);

// tokens[page(pos), pos % block_size] = token_ids[r] for every row r of the uploaded batch.
struct DeviceBatch;
void launch_store_token_ids(const DeviceBatch& batch, int32_t* token_pages, int32_t block_size, cudaStream_t stream);

}  // namespace qs::cuda

// The sampler's per-row passes spread over vocabulary chunks (sampling_chunked.cu), for batches of
// fewer rows than SMs, where one block per row leaves the GPU nearly idle (one sampled stream paid
// ~0.5 ms for its top-p thresholds, ~0.7 ms for logprobs: bench/kernels/NOTES.md "Sampling").
// Grids are (chunks, rows); a radix round is one launch whose blocks add their chunk's histogram
// into the row's global one, the last block of the row (a device counter) picking the digit.
// Results equal the one-block kernels' (sampling_kernels.cu) except the lse's summation order.
#pragma once

#include <cstddef>
#include <cstdint>

#include <cuda_runtime.h>

#include "backend/cuda/sampling_kernels.h"

namespace qs::cuda {

// A row's selection state across the launches (zeroed before the first).
struct RowSelect {
    uint32_t raw_max_key;  // order key of the raw row's max (statistics)
    uint32_t max_key;      // order key of max(l · inv_t) (thresholds)
    uint32_t done;         // blocks of the current launch that finished (the last resets it)
    uint32_t prefix;       // digits chosen so far in the current selection
    double above;          // weight above the chosen digits
    double target;         // the current selection's target weight
    uint32_t kth;          // statistics: key of the N-th largest raw logit
    int32_t above_count;   // statistics: ids gathered above kth
    float tau_k, tau_p;    // thresholds: top-k's and top-p's (set when the row has them)
};

// Scratch carved from one region: [R] RowSelect, [R, kMaxBins] histograms (both zeroed per call),
// then per (row, chunk) the lse part sums and the lowest tie ids at kth, per row the ids above.
struct ChunkedScratch {
    RowSelect* rows = nullptr;
    unsigned long long* hist = nullptr;  // [R, kMaxBins]
    double* chunk_sum = nullptr;         // [R, chunks]
    int32_t* tie_ids = nullptr;          // [R, chunks, kMaxTopLogprobs]
    int32_t* tie_count = nullptr;        // [R, chunks]
    int32_t* above_ids = nullptr;        // [R, kMaxTopLogprobs]
    size_t zeroed_bytes = 0;             // rows + hist
};

size_t chunked_scratch_bytes(int64_t R, int32_t chunks);
ChunkedScratch carve_chunked_scratch(void* base, int64_t R, int32_t chunks);

// Step 1 (logprob statistics: lse, the top N by value then id) and the thresholds of step 3
// (p.draw_thresholds for every non-greedy row), chunked. The scratch must have been zeroed
// (zeroed_bytes) before the first of them in a call.
void launch_chunked_stats(const SamplingLaunch& p, const ChunkedScratch& s, cudaStream_t stream);
void launch_chunked_thresholds(const SamplingLaunch& p, const SamplingNeeds& needs, const ChunkedScratch& s,
                               cudaStream_t stream);

}  // namespace qs::cuda

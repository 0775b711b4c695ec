// Whether a step of max_num_batched_tokens fits in a GPU, decided before the warm-up forward of
// that size is run (a warm-up that runs out of device memory aborts in cudaMalloc with nothing
// to say which knob to turn). Two small warm-up forwards measure the activation arena at two
// token counts; the arena and the warm-up's own one-sequence cache grow linearly in the tokens
// of a step, so the pair predicts the bytes the large warm-up needs, and from the free device
// memory the largest step that fits. Pure arithmetic (unit-tested on CPU with made-up device
// sizes); gpu_cache_budget_mb (backend/make_backend) feeds it measurements.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace qs {

// One warm-up forward: its tokens and the activation arena's high water after it.
struct ArenaProbe {
    int64_t tokens = 0;
    size_t arena_bytes = 0;
};

struct BatchedTokensFitInput {
    ArenaProbe small, large;          // measured, small.tokens < large.tokens
    size_t arena_reserved_bytes = 0;  // device bytes the arena already holds (reused by the big step)
    size_t warm_cache_bytes_per_token = 0;  // the warm-up sequence's KV pages per token
    size_t warm_cache_fixed_bytes = 0;      // ... and its state slot
    size_t free_bytes = 0, total_bytes = 0;  // cudaMemGetInfo after the probes
    double utilization = 0.9;         // --gpu-memory-utilization
    size_t keep_bytes = 0;            // what must stay free for the cache at least
    int64_t wanted_tokens = 0;        // --max-num-batched-tokens
};

struct BatchedTokensFit {
    bool fits = false;
    size_t bytes_per_token = 0;      // measured slope: arena + warm-up cache
    size_t needed_bytes = 0;         // predicted new device bytes of a wanted_tokens warm-up
    size_t available_bytes = 0;      // what utilization leaves for them after the weights
    int64_t max_fitting_tokens = 0;  // largest multiple of 256 (of 16 below 256) that fits; 0: none
};

// The predicted need includes a 10 % margin over the linear fit and one arena chunk (256 MiB) of
// fragmentation.
BatchedTokensFit fit_batched_tokens(const BatchedTokensFitInput& in);

// "--max-num-batched-tokens N does not fit: ...; use --max-num-batched-tokens M or less (or ...)".
std::string batched_tokens_oom_message(const BatchedTokensFitInput& in, const BatchedTokensFit& fit);

}  // namespace qs

// Sampler: turns one row of logits into the next token under a request's SamplingParams.
// Order (as vLLM): repetition penalty (prompt + output tokens), presence and frequency penalties
// (output tokens), then greedy argmax if temperature == 0, else temperature, top-k, top-p, min-p
// and one draw from the request's own generator. Each completion owns its generator, seeded from
// the request seed, and consumes exactly one uniform per sampled token, so results do not depend
// on batching. Logprobs are taken from the raw model distribution (log-softmax of the logits).
// Used on the engine thread.
#pragma once

#include <cstdint>
#include <random>
#include <unordered_map>
#include <vector>

#include "engine/request.h"

namespace qs {

// Per-completion sampling state: generator and token counts for the penalties.
class SamplerState {
public:
    SamplerState(const SamplingParams& params, const std::vector<int32_t>& prompt_ids, int32_t completion_index);

    // Draws a uniform in [0, 1) from this completion's generator.
    double next_uniform();
    // Counts an output token for the penalties; a no-op when the params this state was made
    // with have none (nothing reads the counts then, and a hash-map update per token is not free).
    void record_output(int32_t token) {
        if (counts_outputs_) ++output_counts_[token];
    }
    const std::unordered_map<int32_t, int32_t>& output_counts() const { return output_counts_; }
    const std::vector<uint8_t>& in_prompt() const { return in_prompt_; }  // by token id (lazy size)

private:
    bool counts_outputs_;
    std::mt19937_64 rng_;
    std::unordered_map<int32_t, int32_t> output_counts_;
    std::vector<uint8_t> in_prompt_;
};

struct SampleResult {
    int32_t token = -1;
    float logprob = 0.0f;                 // of `token` under the raw model distribution
    std::vector<TokenLogprob> top;        // top-k raw logprobs (when asked)
};

// Applies the penalties to logits in place (needs the state's token history).
void apply_penalties(float* logits, int64_t vocab, const SamplingParams& p, const SamplerState& s);
// Whether apply_penalties would change anything (else callers read the logits row in place).
bool has_penalties(const SamplingParams& p, const SamplerState& s);
// Index of the largest value (the first one on ties).
int32_t argmax(const float* x, int64_t n);

// The distribution tokens are drawn from, after penalties, temperature, top-k, top-p and min-p:
// probs [vocab] summing to 1 (zeros outside the kept set). Requires temperature > 0.
std::vector<float> sampling_distribution(const float* penalised_logits, int64_t vocab, const SamplingParams& p);

// Index i with cumulative probability crossing u (u in [0, 1)); skips zero-probability tokens.
int32_t draw_from(const std::vector<float>& probs, double u);

// Picks the next token from one logits row (penalties, temperature, top-k/p, min-p; greedy when
// temperature is 0), advancing the generator unless greedy. Does not record it.
int32_t pick_token(const float* logits, int64_t vocab, const SamplingParams& p, SamplerState& s);

// Samples one token (advancing the state's generator unless greedy) and fills logprobs if asked.
SampleResult sample_token(const float* logits, int64_t vocab, const SamplingParams& p, SamplerState& s);

// Raw logprob of `token` and the top k (k may be 0) from logits.
void raw_logprobs(const float* logits, int64_t vocab, int32_t token, int64_t k, float* token_logprob,
                  std::vector<TokenLogprob>* top);

}  // namespace qs

// A generation request as the engine sees it (token ids in, token ids + text out) and the
// events it streams back. Shared by the engine (engine thread) and its callers (any thread).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/status.h"
#include "image/image_processor.h"

namespace qs {

namespace grammar {
class CompiledGrammar;
}

// One logit_bias entry: bias is added to the token's raw logit.
struct TokenBias {
    int32_t token;
    float bias;
};
inline constexpr size_t kMaxLogitBias = 1024;  // logit_bias entries per request

struct SamplingParams {
    double temperature = 1.0;          // 0 = greedy
    double top_p = 1.0;                // (0, 1]
    int64_t top_k = 0;                 // 0 = off
    double min_p = 0.0;                // [0, 1]
    double repetition_penalty = 1.0;   // > 0; 1 = off
    double presence_penalty = 0.0;     // [-2, 2]
    double frequency_penalty = 0.0;    // [-2, 2]
    std::optional<uint64_t> seed;      // reproducible sampling regardless of batching
    int64_t max_tokens = 16;           // >= 1 completion tokens
    bool ignore_eos = false;
    std::vector<int32_t> stop_token_ids;  // in addition to the model's EOS ids (unless ignore_eos)
    std::vector<std::string> stop;        // stop strings, matched on detokenized text
    bool include_stop_str_in_output = false;
    int64_t logprobs = -1;             // -1: none; k >= 0: sampled token's logprob + top k
    int64_t n = 1;                     // completions sharing the prompt
    std::vector<TokenBias> logit_bias;  // added to the raw logits before penalties; token ids < vocab
    int64_t min_tokens = 0;  // EOS and stop_token_ids are banned until this many completion tokens
    bool skip_special_tokens = true;  // special tokens add no text (vLLM's default)

    // Checks ranges; the message names the parameter.
    Status validate() const;
};

enum class FinishReason : uint8_t { kNone, kStop, kLength, kAbort, kError };
const char* finish_reason_name(FinishReason r);  // "stop", "length", "abort", "error"

struct GenerationRequest {
    std::string id;                    // unique among live requests
    std::vector<int32_t> prompt_ids;
    SamplingParams params;
    int32_t priority = 0;              // lower runs first; FIFO within a priority
    // Structured outputs: every completion follows this grammar (null: none), ending with a stop
    // token once it is complete. With grammar_after_token >= 0 the constraint starts after that
    // token is generated (</think>: the reasoning is free, the answer constrained).
    std::shared_ptr<const grammar::CompiledGrammar> grammar;
    int32_t grammar_after_token = -1;
    // The prompt's images and videos in order, preprocessed (image/image_processor.h,
    // image/video_processor.h); placed as model/media_runs says: an image is a maximal run of
    // <|image_pad|> (ModelConfig::image_token_id) of its merged tokens, a video grid_t runs of
    // <|video_pad|> (ModelConfig::video_token_id), one per temporal patch.
    // Engine::submit refuses them on a model without a vision tower or a backend without M-RoPE.
    std::vector<std::shared_ptr<const ImagePatches>> images;
};

struct TokenLogprob {
    int32_t token_id;
    float logprob;
};

// When a completion passed each stage, in seconds of the engine's clock (steady, as
// core/timer.h's now_seconds; only differences mean anything); < 0: not reached. The durations
// are vLLM's (vllm/v1/metrics/stats.py): queue = first scheduled - arrival, prefill = first token
// - first scheduled, decode = last token - first token, inference = last token - first scheduled,
// so prefill + decode = inference. Only the first scheduling counts: a preempted completion's
// wait to be recomputed is part of its prefill or decode time, never of its queue time (as vLLM).
// The n completions of a request share its arrival and first scheduled step (the fork comes
// after the shared prompt is computed); each has its own first and last token.
struct RequestTiming {
    double arrival_s = -1;          // the engine accepted the request (submit)
    double first_scheduled_s = -1;  // the first step that computed any of its tokens
    double first_token_s = -1;      // the step that produced its first token
    double last_token_s = -1;       // the step that produced its last token

    bool scheduled() const { return arrival_s >= 0 && first_scheduled_s >= 0; }
    bool has_tokens() const { return scheduled() && first_token_s >= 0 && last_token_s >= 0; }
    double queue_s() const { return first_scheduled_s - arrival_s; }
    double prefill_s() const { return first_token_s - first_scheduled_s; }
    double decode_s() const { return last_token_s - first_token_s; }
    double inference_s() const { return last_token_s - first_scheduled_s; }
};

// One step's output for one completion (index < n) of a request.
struct RequestOutput {
    std::string request_id;
    int32_t index = 0;                    // which of the n completions
    std::vector<int32_t> token_ids;       // new tokens this step (MTP can emit several)
    std::string text;                     // new text (complete UTF-8 only; stop strings cut)
    std::vector<TokenLogprob> logprobs;   // per new token (when asked)
    std::vector<std::vector<TokenLogprob>> top_logprobs;  // per new token, k entries
    FinishReason finish_reason = FinishReason::kNone;
    std::string stop_reason;              // the stop string or token that ended it, if any
    std::string error;                    // with kError
    int64_t num_prompt_tokens = 0;
    int64_t num_cached_prompt_tokens = 0; // prefix-cache hits
    int64_t num_completion_tokens = 0;    // so far, this completion
    RequestTiming timing;                 // on the final output (finish_reason != kNone) only
};

}  // namespace qs

// Benchmark fixtures: a JSONL file of requests for the load generator, one request per line:
//   {"endpoint": "/v1/chat/completions" | "/v1/completions", "prompt_tokens": N, "body": {...}}
// `body` is the OpenAI request without the streaming fields (the load generator adds "stream" and
// "stream_options"); "prompt_tokens" is the prompt length (exact for token-id prompts; for the
// generated text, exact with the Qwen3 tokenizer before the chat template is applied). Also a
// seeded generator shaped like the seed workload. Used on the bench main thread (`qwenserve bench
// fixture`, and loading before a run).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/status.h"

namespace qs::bench {

struct FixtureRequest {
    std::string endpoint;       // path on the server
    int64_t prompt_tokens = 0;  // intended prompt length
    nlohmann::json body;        // request body; body["max_tokens"] is the completion limit
};

struct FixtureOptions {
    int64_t num_requests = 1024;
    uint64_t seed = 0;
    int64_t min_prompt = 200;  // prompt tokens, inclusive (text prompts need > 6)
    int64_t max_prompt = 1800;
    int64_t max_tokens = 256;    // completion limit
    int64_t context_len = 2048;  // prompt + max_tokens + template overhead stays within this
    std::string distribution =
        "uniform";           // "uniform" or "normal" (mean mid-range, sd range/6, clipped)
    bool token_ids = false;  // true: /v1/completions with "prompt" as token ids (exact length)
    std::string model = "qwen3.6-35b-a3b";
    double temperature = 0.0;
    bool ignore_eos = true;
};

// Tokens the chat template adds around one user message with thinking disabled (Qwen3.6:
// "<|im_start|>user\n" ... "<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n").
inline constexpr int64_t kChatTemplateOverhead = 16;

// Requests are a pure function of the options: same options, same bytes. Prompt lengths are drawn
// from the distribution; a request whose prompt + max_tokens + overhead exceeds context_len gets
// its max_tokens lowered to fit (so the prompt distribution is kept and the server accepts it).
Result<std::vector<FixtureRequest>> generate_fixture(const FixtureOptions& options);

std::string fixture_line(const FixtureRequest& request);  // one JSON line, no newline
Status write_fixture(const std::string& path, const std::vector<FixtureRequest>& requests);
// Errors name the file and the line.
Result<std::vector<FixtureRequest>> read_fixture(const std::string& path);

}  // namespace qs::bench

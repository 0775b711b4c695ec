// Bench requests from a ShareGPT-format dataset: a JSON list of {"conversations": [{"from":
// "human", "value": "..."}, {"from": "gpt", "value": "..."}, ...], ...}. As vLLM's benchmark
// (ShareGPTDataset): the conversations are shuffled with the seed; each gives one chat request
// whose prompt is its first human turn and whose max_tokens is the token length of the gpt turn
// that answers it; conversations whose prompt or answer is under min_tokens, whose prompt is
// over max_prompt_tokens, or whose prompt + answer is over max_total_tokens are skipped; the
// first num_requests that pass are kept. Token lengths come from the caller's counter (the
// served model's tokenizer). Used on the bench main thread.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "bench/fixtures.h"
#include "core/status.h"

namespace qs::bench {

struct ShareGptOptions {
    int64_t num_requests = 1000;  // at most this many (fewer if fewer pass the filter)
    uint64_t seed = 0;
    int64_t min_tokens = 4;          // prompt and answer at least this long
    int64_t max_prompt_tokens = 1024;
    int64_t max_total_tokens = 2048;  // prompt + answer
    int64_t output_len = 0;           // > 0: every request's max_tokens (the answer's length ignored)
    std::string model = "qwen3.6-35b-a3b";
    double temperature = 0.0;
    bool ignore_eos = true;  // generate max_tokens tokens, as vLLM's benchmark with --ignore-eos
};

using TokenCounter = std::function<int64_t(std::string_view)>;

// Errors name the file and, for a malformed entry, its index and field.
Result<std::vector<FixtureRequest>> load_sharegpt(const std::string& path, const ShareGptOptions& options,
                                                  const TokenCounter& count_tokens);
// The same from the JSON text (`name` stands for the file in errors).
Result<std::vector<FixtureRequest>> parse_sharegpt(const std::string& json_text, const std::string& name,
                                                   const ShareGptOptions& options, const TokenCounter& count_tokens);

}  // namespace qs::bench

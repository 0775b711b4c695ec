// The input of `qwenserve generate --input prompts.jsonl`: one JSON object per line with either
// "prompt_ids" (token ids) or "prompt" (text, tokenized with the model's tokenizer), an optional
// "id", and the sampling fields of SamplingParams. Parsing names the line and the field of any
// error. Used on the CLI's main thread.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/status.h"
#include "engine/request.h"

namespace qs::cli {

struct BatchItem {
    int64_t line = 0;                       // 1-based line number in the input file
    std::string id;                         // "id" field, else "line-<line>"
    std::optional<std::vector<int32_t>> prompt_ids;
    std::optional<std::string> prompt;      // text: tokenized later
    SamplingParams params;
};

// Parses one line (`line` is its 1-based number, for messages); `defaults` supplies fields the
// line leaves out. Checks types and SamplingParams::validate(); not the vocabulary.
Result<BatchItem> parse_batch_line(const std::string& text, int64_t line, const SamplingParams& defaults);

// Reads every non-blank line of a JSONL file; ids must be unique.
Result<std::vector<BatchItem>> read_batch_file(const std::string& path, const SamplingParams& defaults);

}  // namespace qs::cli

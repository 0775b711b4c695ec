// OpenAI response shapes: chat.completion / chat.completion.chunk / text_completion objects,
// usage, logprobs in both APIs' formats, and SSE framing ("data: {json}\n\n", "data: [DONE]\n\n").
// Pure functions; any thread.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "engine/request.h"
#include "server/output_parser.h"
#include "server/text_pipeline.h"

namespace qs {

// The fields every object of one request shares.
struct ResponseHeader {
    std::string id;       // "chatcmpl-..." / "cmpl-..."
    int64_t created = 0;  // unix seconds
    std::string model;
};

nlohmann::json usage_json(int64_t prompt_tokens, int64_t completion_tokens, int64_t cached_tokens);

// One chat.completion.chunk / text_completion chunk with the given choices array.
nlohmann::json chat_chunk(const ResponseHeader& h, nlohmann::json choices, bool usage_null);
nlohmann::json completion_chunk(const ResponseHeader& h, nlohmann::json choices, bool usage_null);

// Chat: {"content": [{token, logprob, bytes, top_logprobs}]} entries for one output, appended.
void append_chat_logprobs(const RequestOutput& out, const TextPipeline& text, nlohmann::json& content);
// Completions: {"tokens", "token_logprobs", "top_logprobs", "text_offset"} arrays, appended;
// text_offset counts bytes from the start of the completion.
void append_completion_logprobs(const RequestOutput& out, const TextPipeline& text, size_t& text_offset,
                                nlohmann::json& logprobs);
nlohmann::json empty_completion_logprobs();

nlohmann::json tool_calls_json(const std::vector<ToolCall>& calls, size_t first_index, bool with_index);

// JSON text, invalid UTF-8 replaced (never throws).
std::string dump(const nlohmann::json& j);
std::string sse_event(const nlohmann::json& j);
inline constexpr const char* kSseDone = "data: [DONE]\n\n";

}  // namespace qs

// The refused-field table (see unsupported_fields.h). Grouped by where the field comes from;
// docs/API.md has the same groups with the fields this server implements or ignores.
#include "server/unsupported_fields.h"

#include <fmt/format.h>

#include <string>
#include <vector>

namespace qs {

namespace {

using J = nlohmann::ordered_json;

constexpr std::string_view kStructured =
    "structured outputs take response_format (json_object, json_schema, structural_tag), structured_outputs or "
    "guided_json / guided_regex / guided_choice / guided_grammar";
constexpr std::string_view kChatOnly = "it is a /v1/chat/completions parameter";

constexpr UnsupportedField kFields[] = {
    // OpenAI chat/completions.
    {"functions", kBothApis, "", "the deprecated function-calling API is not supported; use 'tools'"},
    {"function_call", kBothApis, "", "the deprecated function-calling API is not supported; use 'tool_choice'"},
    {"audio", kBothApis, "", "audio output is not supported (the model writes text only)"},
    {"modalities", kBothApis, R"([["text"]])", "only text output is supported"},
    {"prediction", kBothApis, "", "predicted outputs are not supported"},
    {"web_search_options", kBothApis, "", "web search is not available"},
    {"reasoning_effort", kBothApis, "",
     "the model has no effort levels; chat_template_kwargs.enable_thinking=false turns thinking off"},
    {"verbosity", kBothApis, R"(["medium"])", "the length of the reply cannot be steered"},
    {"store", kBothApis, "[false]", "completions are not stored"},
    {"service_tier", kBothApis, R"(["auto", "default"])", "this server has one service tier"},
    {"moderation", kBothApis, "", "moderation is not available"},
    {"prompt_cache_options", kBothApis, R"([{}, {"mode": "implicit"}])",
     "the prefix cache is automatic (LRU): no explicit breakpoints or lifetimes"},
    {"prompt_cache_retention", kBothApis, R"(["in_memory"])",
     "the prefix cache is in memory (LRU), with no retention guarantee"},
    // OpenAI completions (echo is also a vLLM chat extension, refused there).
    {"echo", kChatApi, "[false]", "echoing the last message in a chat reply is not supported (completions echo the prompt)"},
    {"suffix", kBothApis, "", "insertion after a suffix is not supported"},
    // vLLM sampling extensions.
    {"use_beam_search", kBothApis, "[false]", "beam search is not supported"},
    {"length_penalty", kBothApis, "[1]", "it only applies to beam search, which is not supported"},
    {"prompt_logprobs", kBothApis, "", "prompt logprobs are not supported"},
    {"allowed_token_ids", kBothApis, "", "restricting sampling to a token list is not supported"},
    {"bad_words", kBothApis, "[[]]", "banning words is not supported"},
    // vLLM request extensions.
    {"add_generation_prompt", kCompletionApi, "", kChatOnly},
    {"continue_final_message", kCompletionApi, "", kChatOnly},
    {"include_reasoning", kBothApis, "[true]", "reasoning is always returned (reasoning_content)"},
    {"documents", kBothApis, "", "the chat template takes no documents"},
    {"chat_template", kBothApis, "", "per-request chat templates are not supported; the model's template is used"},
    {"prompt_embeds", kBothApis, "", "prompt embeddings are not supported"},
    {"guided_decoding_backend", kBothApis, R"(["auto", "xgrammar"])", "the one grammar backend is xgrammar"},
    {"guided_whitespace_pattern", kBothApis, "", kStructured},
    {"structural_tag", kBothApis, "", kStructured},
    {"logits_processors", kBothApis, "", "custom logits processors are not supported"},
    {"request_id", kBothApis, "", "the server assigns request ids"},
    {"cache_salt", kBothApis, "", "prefix-cache salting is not supported (all requests share the prefix cache)"},
    {"kv_transfer_params", kBothApis, "", "disaggregated serving is not supported"},
    {"vllm_xargs", kBothApis, "", "no extension on this server reads it"},
    {"return_tokens_as_token_ids", kBothApis, "[false]", "logprob tokens are always strings"},
    {"return_token_ids", kBothApis, "[false]", "token ids are not returned"},
    // Qwen's DashScope API (OpenAI-compatible mode) takes these at the top level; neither OpenAI nor
    // vLLM defines them, so ignoring them would be a silent no-op for clients moving to this server.
    {"enable_thinking", kBothApis, "",
     "set it in chat_template_kwargs ({\"chat_template_kwargs\": {\"enable_thinking\": false}}), where Qwen's chat "
     "template reads it"},
    {"thinking_budget", kBothApis, "", "a cap on reasoning tokens is not supported (max_tokens caps the whole reply)"},
    {"enable_search", kBothApis, "", "web search is not available"},
    // Fields of the other endpoint (implemented there).
    {"messages", kCompletionApi, "", kChatOnly},
    {"tools", kCompletionApi, "", kChatOnly},
    {"tool_choice", kCompletionApi, "", kChatOnly},
    {"parallel_tool_calls", kCompletionApi, "[true]", kChatOnly},
    {"max_completion_tokens", kCompletionApi, "", kChatOnly},
    {"top_logprobs", kCompletionApi, "", kChatOnly},
    {"chat_template_kwargs", kCompletionApi, "", kChatOnly},
    {"prompt", kChatApi, "", "it is a /v1/completions parameter; send 'messages'"},
};

// A value for an error message, cut short.
std::string shown(const J& v) {
    std::string s = v.dump();
    return s.size() <= 60 ? s : s.substr(0, 57) + "...";
}

// kFields[i].accepted, parsed once.
const std::vector<J>& accepted_values() {
    static const std::vector<J> values = [] {
        std::vector<J> v;
        for (const auto& f : kFields) v.push_back(f.accepted.empty() ? J::array() : J::parse(f.accepted));
        return v;
    }();
    return values;
}

}  // namespace

std::span<const UnsupportedField> unsupported_fields() { return kFields; }

std::optional<ApiError> check_unsupported_fields(const J& body, ApiKind kind) {
    const uint8_t api = kind == ApiKind::kChat ? kChatApi : kCompletionApi;
    const auto& accepted = accepted_values();
    for (size_t i = 0; i < std::size(kFields); ++i) {
        const UnsupportedField& f = kFields[i];
        if (!(f.apis & api)) continue;
        auto it = body.find(std::string(f.name));
        if (it == body.end() || it->is_null()) continue;
        bool ok = false;
        for (const J& a : accepted[i]) ok |= *it == a;
        if (ok) continue;
        ApiError e = ApiError::bad_request(
            accepted[i].empty()
                ? fmt::format("'{}' is not supported: {}", f.name, f.why)
                : fmt::format("'{}' = {} is not supported: {} (accepted: {})", f.name, shown(*it), f.why,
                              accepted[i].size() == 1 ? shown(accepted[i][0]) : shown(accepted[i])),
            std::string(f.name));
        e.code = "unsupported_value";
        return e;
    }
    return std::nullopt;
}

}  // namespace qs

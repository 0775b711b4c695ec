// OpenAI request bodies → validated generation specs. Every rejection is an ApiError naming the
// offending parameter (param) with the OpenAI error shape; nothing here throws. Checks that need
// the tokenizer or the engine (prompt length vs max_model_len) happen later, in generation.cpp.
// Stateless; runs on the worker pool.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "engine/request.h"
#include "grammar/grammar_spec.h"
#include "server/api_error.h"
#include "server/mm_processor_kwargs.h"
#include "server/text_pipeline.h"

namespace qs {

enum class ApiKind { kChat, kCompletion };

// An image_url or video_url part's URL (fetched and checked later, on the worker pool).
struct MediaUrl {
    bool video = false;
    std::string url;
    bool operator==(const MediaUrl&) const = default;
};

struct GenerationSpec {
    ApiKind kind = ApiKind::kChat;
    std::string model;
    // Chat.
    nlohmann::ordered_json messages;            // non-empty array
    nlohmann::ordered_json tools;               // null or a non-empty array
    // The image_url and video_url parts' URLs, in message order; `messages` holds each video_url
    // part as {"type": "video"}, the part the chat templates render (as vLLM hands them over).
    std::vector<MediaUrl> media;
    MediaKwargs media_kwargs;                   // vLLM's mm_processor_kwargs (server/mm_processor_kwargs)
    bool tool_choice_none = false;              // "none": tools rendered, calls not parsed
    bool tool_choice_required = false;          // "required": one or more calls (constrained)
    std::string tool_choice_function;           // a named function: exactly one call of it (constrained)
    bool parallel_tool_calls = true;            // false: at most one call (the first; "required" constrains to one)
    // add_generation_prompt, continue_final_message (vLLM) and chat_template_kwargs (the object as
    // sent; enable_thinking, preserve_thinking typed) as parse_chat_render_options reads them.
    ChatRenderOptions chat_render;
    // Completions: one prompt or a batch of them (vLLM: a list of strings or of token-id lists);
    // prompt i's completions are the response's choices i·n .. i·n + n − 1.
    struct Prompt {
        std::optional<std::string> text;  // the text, or
        std::vector<int32_t> ids;         // token ids
    };
    std::vector<Prompt> prompts;
    SamplingParams params;                      // max_tokens only meaningful if max_tokens_given
    bool max_tokens_given = false;
    bool stream = false;
    bool include_usage = false;                 // stream_options.include_usage
    bool continuous_usage = false;              // stream_options.continuous_usage_stats (vLLM)
    bool echo = false;                          // completions: the prompt starts the text
    int32_t priority = 0;                       // vLLM: lower runs first (needs --scheduling-policy priority)
    int64_t truncate_prompt_tokens = 0;         // vLLM: keep the last k prompt tokens; 0 off, -1 max_model_len
    bool logprobs = false;                      // chat: logprobs; completions: logprobs != null
    int64_t n_returned = 0;                     // best_of > n: params.n = best_of, this many returned (0: all)
    bool json_object = false;                   // response_format {"type": "json_object"}
    // Structured outputs (server/structured_output_parse): the constraint and the field that
    // asked for it ("tool_choice" with no grammar yet: built from the tools at submit).
    std::optional<grammar::GrammarSpec> grammar;
    std::string grammar_param;
};

// The most prompts one completions request may batch (a list longer is a 400 naming 'prompt').
inline constexpr size_t kMaxBatchedPrompts = 256;

// model_names: the names this server answers to (--served-model-name). any_template_kwargs:
// the chat template is rendered by the Jinja interpreter, which takes every
// chat_template_kwargs key (else only the keys the native Qwen renderers read).
std::optional<ApiError> parse_generation_request(ApiKind kind, std::string_view body,
                                                 const std::vector<std::string>& model_names,
                                                 GenerationSpec& out, bool any_template_kwargs = false);

// A chat request's template flags: add_generation_prompt, continue_final_message (not both true)
// and chat_template_kwargs (an object; enable_thinking and preserve_thinking booleans; with
// any_template_kwargs false, a key the native renderers do not read is refused). Chat completions
// and /tokenize's messages form read them through this one function.
std::optional<ApiError> parse_chat_render_options(const nlohmann::ordered_json& o, bool any_template_kwargs,
                                                  ChatRenderOptions& out);

// Parses a body into a JSON object or explains why it is not one.
std::optional<ApiError> parse_json_object(std::string_view body, nlohmann::ordered_json& out);

}  // namespace qs

// Chat templates: OpenAI-shaped messages (+ tools) -> the prompt text the model was trained on.
// Native renderers reproduce, byte for byte, what jinja2 (as transformers configures it) makes
// of two templates:
//   kQwen3   the Qwen3 template (shared/data/tokenizers/qwen3/tokenizer_config.json): JSON tool
//            calls, tools before nothing, thinking toggled by enable_thinking=false.
//   kQwen35  the Qwen3.5/3.6 template (model.md §5.2): XML tool calls (<function=...>),
//            <think> opened by the generation prompt, preserve_thinking (3.6).
// Anything jinja would raise on (no messages, no user query, system not first, unknown role,
// content of the wrong type, ...) is an error naming the problem. Stateless; any thread.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "core/status.h"

namespace qs::tok {

enum class ChatFormat { kQwen3, kQwen35 };

struct ChatOptions {
    bool add_generation_prompt = true;
    bool enable_thinking = true;      // false renders the empty think block
    bool preserve_thinking = false;   // kQwen35: keep every assistant turn's reasoning
    bool add_vision_id = false;       // kQwen35: "Picture N: " before image parts
    // The prompt ends right after the last message's text (its end-of-turn cut off), as
    // transformers' apply_chat_template(continue_final_message=True) does; needs
    // add_generation_prompt false.
    bool continue_final_message = false;
};

class ChatTemplate {
public:
    explicit ChatTemplate(ChatFormat format) : format_(format) {}
    // Picks the renderer whose template family `template_text` (a model's chat template) is;
    // an error if it is neither.
    static Result<ChatTemplate> detect(const std::string& template_text);
    // By name: "qwen3" or "qwen3.5" / "qwen3.6".
    static Result<ChatTemplate> from_name(const std::string& name);

    // messages: array of {role, content (string | array of parts | null), reasoning_content?,
    // tool_calls?}; tools: array of OpenAI tool objects or null. Key order is kept (tools are
    // printed as JSON), hence ordered_json. For kQwen35, tool-call `arguments` given as a JSON
    // string are parsed first, as vLLM does before templating.
    Result<std::string> render(const nlohmann::ordered_json& messages,
                               const nlohmann::ordered_json& tools, const ChatOptions& options) const;

    ChatFormat format() const { return format_; }

private:
    ChatFormat format_;
};

// continue_final_message: the rendered chat up to the last occurrence of the final message's
// text (stripped; for an array of parts, its last text part), as transformers cuts it.
Result<std::string> cut_after_final_message(const nlohmann::ordered_json& messages, std::string rendered);

// The two renderers (chat_template_qwen3.cpp, chat_template_qwen35.cpp).
Result<std::string> render_qwen3(const nlohmann::ordered_json& messages,
                                 const nlohmann::ordered_json& tools, const ChatOptions& options);
Result<std::string> render_qwen35(const nlohmann::ordered_json& messages,
                                  const nlohmann::ordered_json& tools, const ChatOptions& options);

}  // namespace qs::tok

// The seam between the server and the tokenizer: chat-template rendering, encode/decode, token
// strings for logprobs, and the parser that splits generated text into reasoning, content and
// tool calls. The server only sees this interface; testing/byte_text_pipeline is a byte-level
// stand-in, and the real implementation wraps src/tokenizer (Tokenizer + ChatTemplate).
// Implementations are immutable after construction and used from the worker threads (render,
// encode) and the connection strands (decode, token_text, parsers): they must be thread-safe.
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "server/output_parser.h"

namespace qs {

struct ChatRenderOptions {
    bool add_generation_prompt = true;
    bool enable_thinking = true;
    bool preserve_thinking = false;       // Qwen3.5/3.6: keep every assistant turn's reasoning
    bool continue_final_message = false;  // end inside the last message (add_generation_prompt false)
    // The request's chat_template_kwargs object (or null): a Jinja-rendered template sees every
    // key as a variable; the native Qwen renderers read only the typed fields above.
    nlohmann::ordered_json template_kwargs;
};

class TextPipeline {
public:
    virtual ~TextPipeline() = default;

    // messages/tools as the client sent them (tools: null or an array). Errors (kInvalidArgument)
    // name the problem ("messages[2]: unknown role 'bot'").
    virtual Result<std::string> render_chat(const nlohmann::ordered_json& messages,
                                            const nlohmann::ordered_json& tools,
                                            const ChatRenderOptions& options) const = 0;
    virtual std::vector<int32_t> encode(std::string_view text) const = 0;
    virtual std::string decode(std::span<const int32_t> ids) const = 0;
    // The bytes one token contributes (logprobs' "token"; may be a partial UTF-8 sequence).
    virtual std::string token_text(int32_t id) const = 0;
    virtual int32_t vocab_size() const = 0;

    // Whether a rendered chat prompt leaves the model inside a reasoning block (the template
    // opened <think>), so that generated text starts as reasoning.
    virtual bool prompt_opens_reasoning(const ChatRenderOptions& options) const = 0;
    // Whether the chat template takes any chat_template_kwargs key (a Jinja-rendered template
    // does); if not, a key the native renderer does not read is refused at parse.
    virtual bool reads_any_template_kwarg() const { return false; }
    virtual std::unique_ptr<OutputParser> make_output_parser(const OutputParserOptions& options) const = 0;
};

}  // namespace qs

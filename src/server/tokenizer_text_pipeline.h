// The real tokenizer behind the server's TextPipeline seam: src/tokenizer's byte-level BPE
// Tokenizer, its chat template, and its streaming ReasoningParser + ToolCallParser
// (schema-typed XML calls). The chat template is rendered natively when it is a Qwen3 or
// Qwen3.5/3.6 template (detected from its text: tokenizer/chat_template), else by the Jinja
// interpreter (server/jinja_chat_template). Immutable after load; thread-safe like the
// Tokenizer it wraps.
#pragma once

#include <memory>
#include <optional>

#include "server/jinja_chat_template.h"
#include "server/text_pipeline.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace qs {

enum class ChatTemplateEngine {
    kAuto,   // the native renderer for a Qwen3 / Qwen3.5-3.6 template, else the Jinja interpreter
    kJinja,  // always the Jinja interpreter (tests compare it with jinja2 on any template)
};

class TokenizerTextPipeline final : public TextPipeline {
public:
    // path: a model directory (tokenizer.json + tokenizer_config.json) or a tokenizer.json.
    // template_file (serve --chat-template): a Jinja file used instead of the tokenizer's
    // template. A template the interpreter cannot parse is an error naming its line.
    static Result<std::unique_ptr<TokenizerTextPipeline>> load(const std::string& path,
                                                                const std::string& template_file = "",
                                                                ChatTemplateEngine engine = ChatTemplateEngine::kAuto);

    Result<std::string> render_chat(const nlohmann::ordered_json& messages, const nlohmann::ordered_json& tools,
                                    const ChatRenderOptions& options) const override;
    std::vector<int32_t> encode(std::string_view text) const override { return tok_->encode(text); }
    std::string decode(std::span<const int32_t> ids) const override { return tok_->decode(ids); }
    std::string token_text(int32_t id) const override { return std::string(tok_->token_bytes(id)); }
    int32_t vocab_size() const override { return tok_->vocab_size(); }
    bool prompt_opens_reasoning(const ChatRenderOptions& options) const override;
    bool reads_any_template_kwarg() const override { return jinja_.has_value(); }
    std::unique_ptr<OutputParser> make_output_parser(const OutputParserOptions& options) const override;

    // EOS ids for the engine: the tokenizer's eos plus <|im_end|> / <|endoftext|> when present.
    std::vector<int32_t> eos_token_ids() const;
    // The Qwen format of the template, or for a Jinja-rendered one the format its output is
    // parsed in (the template's if it is a Qwen one, else the model's: Qwen3.6's XML calls).
    tok::ChatFormat chat_format() const { return format_; }
    // Whether the template is rendered by the Jinja interpreter.
    bool renders_with_jinja() const { return jinja_.has_value(); }
    // The tokenizer itself (the engine detokenizes with it).
    std::shared_ptr<const tok::Tokenizer> tokenizer() const { return tok_; }

private:
    TokenizerTextPipeline(std::unique_ptr<tok::Tokenizer> tok, tok::ChatFormat format, bool qwen_template,
                          std::optional<JinjaChatTemplate> jinja)
        : tok_(std::move(tok)), format_(format), qwen_template_(qwen_template), jinja_(std::move(jinja)) {}
    std::shared_ptr<tok::Tokenizer> tok_;
    tok::ChatFormat format_;
    bool qwen_template_;  // the template is a Qwen3 or Qwen3.5/3.6 one (whoever renders it)
    std::optional<JinjaChatTemplate> jinja_;  // set: the template is rendered by the interpreter
};

}  // namespace qs

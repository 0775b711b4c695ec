// The real tokenizer behind the server's TextPipeline seam: src/tokenizer's byte-level BPE
// Tokenizer, its native chat-template renderers (Qwen3 / Qwen3.5-3.6, detected from the model's
// template), and its streaming ReasoningParser + ToolCallParser (schema-typed XML calls).
// Immutable after load; thread-safe like the Tokenizer it wraps.
#pragma once

#include <memory>
#include <optional>

#include "server/text_pipeline.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace qs {

class TokenizerTextPipeline final : public TextPipeline {
public:
    // path: a model directory (tokenizer.json + tokenizer_config.json) or a tokenizer.json.
    // template_file (serve --chat-template): a Jinja file used instead of the tokenizer's
    // template; it must be a Qwen3 or Qwen3.5/3.6 template, which the native renderers
    // reproduce (there is no general Jinja interpreter): anything else is an error naming it.
    static Result<std::unique_ptr<TokenizerTextPipeline>> load(const std::string& path,
                                                                const std::string& template_file = "");

    Result<std::string> render_chat(const nlohmann::ordered_json& messages, const nlohmann::ordered_json& tools,
                                    const ChatRenderOptions& options) const override;
    std::vector<int32_t> encode(std::string_view text) const override { return tok_->encode(text); }
    std::string decode(std::span<const int32_t> ids) const override { return tok_->decode(ids); }
    std::string token_text(int32_t id) const override { return std::string(tok_->token_bytes(id)); }
    int32_t vocab_size() const override { return tok_->vocab_size(); }
    bool prompt_opens_reasoning(const ChatRenderOptions& options) const override;
    std::unique_ptr<OutputParser> make_output_parser(const OutputParserOptions& options) const override;

    // EOS ids for the engine: the tokenizer's eos plus <|im_end|> / <|endoftext|> when present.
    std::vector<int32_t> eos_token_ids() const;
    tok::ChatFormat chat_format() const { return template_.format(); }
    // The tokenizer itself (the engine detokenizes with it).
    std::shared_ptr<const tok::Tokenizer> tokenizer() const { return tok_; }

private:
    TokenizerTextPipeline(std::unique_ptr<tok::Tokenizer> tok, tok::ChatTemplate t)
        : tok_(std::move(tok)), template_(t) {}
    std::shared_ptr<tok::Tokenizer> tok_;
    tok::ChatTemplate template_;
};

}  // namespace qs

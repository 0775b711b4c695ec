// A test double for the tokenizer seam: token id b < 256 is the byte b; ids 256.. are ChatML
// special tokens (<|im_start|>, <|im_end|>, <|endoftext|>) recognised in text. The chat template
// is plain ChatML with Qwen3.6's generation prompt (<think> opened unless enable_thinking=false)
// and tools listed as JSON in a system block. Not the real tokenizer: used by the server tests,
// the e2e tests and `serve --fake-engine` until src/tokenizer is wired in. Thread-safe (immutable).
#pragma once

#include "server/text_pipeline.h"

namespace qs {

class ByteTextPipeline final : public TextPipeline {
public:
    static constexpr int32_t kImStart = 256;
    static constexpr int32_t kImEnd = 257;
    static constexpr int32_t kEndOfText = 258;
    static constexpr int32_t kVocabSize = 259;

    Result<std::string> render_chat(const nlohmann::ordered_json& messages,
                                    const nlohmann::ordered_json& tools,
                                    const ChatRenderOptions& options) const override;
    std::vector<int32_t> encode(std::string_view text) const override;
    std::string decode(std::span<const int32_t> ids) const override;
    std::string token_text(int32_t id) const override;
    int32_t vocab_size() const override { return kVocabSize; }
    bool prompt_opens_reasoning(const ChatRenderOptions& options) const override {
        return options.add_generation_prompt && options.enable_thinking;
    }
    std::unique_ptr<OutputParser> make_output_parser(const OutputParserOptions& options) const override {
        return make_qwen_output_parser(options);
    }
};

}  // namespace qs

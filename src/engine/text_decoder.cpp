// TokenizerTextDecoder: the tokenizer's incremental detokenizer behind the engine's interface.
#include "engine/text_decoder.h"

#include "tokenizer/detokenizer.h"
#include "tokenizer/tokenizer.h"

namespace qs {

namespace {
class TokenizerStream final : public StreamDecoder {
public:
    TokenizerStream(std::shared_ptr<const tok::Tokenizer> t, bool skip_special_tokens)
        : tokenizer_(std::move(t)), detok_(*tokenizer_, skip_special_tokens) {}
    std::string push(int32_t token) override { return detok_.push(token); }
    std::string finish() override { return detok_.finish(); }

private:
    std::shared_ptr<const tok::Tokenizer> tokenizer_;  // keeps the tokenizer alive
    tok::IncrementalDetokenizer detok_;
};
}  // namespace

std::unique_ptr<StreamDecoder> TokenizerTextDecoder::start(bool skip_special_tokens) const {
    return std::make_unique<TokenizerStream>(tokenizer_, skip_special_tokens);
}

}  // namespace qs

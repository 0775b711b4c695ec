// TextDecoder: how the engine turns a completion's token ids into text, one token at a time
// (complete UTF-8 characters only). The server plugs in the real tokenizer (TokenizerTextDecoder);
// tests plug in small fakes. Stream decoders are used on the engine thread.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

namespace qs {

namespace tok {
class Tokenizer;
}

class StreamDecoder {
public:
    virtual ~StreamDecoder() = default;
    // Text completed by this token (may be empty while a character is split over tokens).
    virtual std::string push(int32_t token) = 0;
    // Whatever is still held back at the end of the stream.
    virtual std::string finish() = 0;
};

class TextDecoder {
public:
    virtual ~TextDecoder() = default;
    // skip_special_tokens: special tokens (<|im_start|>, <|vision_pad|>, ...) add no text.
    virtual std::unique_ptr<StreamDecoder> start(bool skip_special_tokens) const = 0;
};

// Decodes with the model's tokenizer (special tokens skipped unless a request asks for them).
class TokenizerTextDecoder final : public TextDecoder {
public:
    explicit TokenizerTextDecoder(std::shared_ptr<const tok::Tokenizer> tokenizer)
        : tokenizer_(std::move(tokenizer)) {}
    std::unique_ptr<StreamDecoder> start(bool skip_special_tokens) const override;

private:
    std::shared_ptr<const tok::Tokenizer> tokenizer_;
};

}  // namespace qs

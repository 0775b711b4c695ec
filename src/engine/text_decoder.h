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
    virtual std::unique_ptr<StreamDecoder> start() const = 0;
};

// Decodes with the model's tokenizer (special tokens skipped, as OpenAI servers do).
class TokenizerTextDecoder final : public TextDecoder {
public:
    explicit TokenizerTextDecoder(std::shared_ptr<const tok::Tokenizer> tokenizer)
        : tokenizer_(std::move(tokenizer)) {}
    std::unique_ptr<StreamDecoder> start() const override;

private:
    std::shared_ptr<const tok::Tokenizer> tokenizer_;
};

}  // namespace qs

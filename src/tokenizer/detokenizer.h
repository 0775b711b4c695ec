// Streaming detokenizer: turns token ids, one at a time, into text that only ever contains
// complete UTF-8 characters. Bytes of a character split over several tokens are held back
// until it completes; bytes that can never complete become U+FFFD exactly where one-shot
// decode() puts them, so the concatenated output of push()...finish() equals decode(all ids).
// One instance per sequence, used by the thread that owns that sequence.
#pragma once

#include <cstdint>
#include <string>

#include "tokenizer/tokenizer.h"

namespace qs::tok {

class IncrementalDetokenizer {
public:
    IncrementalDetokenizer(const Tokenizer& tokenizer, bool skip_special_tokens = false)
        : tokenizer_(&tokenizer), skip_special_tokens_(skip_special_tokens) {}

    // Text completed by this token (often empty for a partial character).
    std::string push(int32_t id);
    // End of sequence: whatever is held back, repaired.
    std::string finish();
    // Bytes held back waiting for the rest of a character (0..3).
    size_t pending_bytes() const { return pending_.size(); }

private:
    const Tokenizer* tokenizer_;
    bool skip_special_tokens_;
    std::string pending_;
};

}  // namespace qs::tok

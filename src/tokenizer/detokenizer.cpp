// Streaming detokenizer (see detokenizer.h).
#include "tokenizer/detokenizer.h"

#include "tokenizer/unicode.h"

namespace qs::tok {

std::string IncrementalDetokenizer::push(int32_t id) {
    pending_.append(tokenizer_->token_bytes(id, skip_special_tokens_));
    // Everything but a trailing valid-yet-incomplete sequence is final: maximal invalid
    // subparts before it cannot grow, so repairing now matches repairing the whole text.
    const size_t keep = utf8_incomplete_tail(pending_);
    const std::string_view ready(pending_.data(), pending_.size() - keep);
    std::string out = is_valid_utf8(ready) ? std::string(ready) : utf8_repair(ready);
    pending_.erase(0, pending_.size() - keep);
    return out;
}

std::string IncrementalDetokenizer::finish() {
    std::string out = utf8_repair(pending_);
    pending_.clear();
    return out;
}

}  // namespace qs::tok

// Streaming <think> splitting (see reasoning_parser.h).
#include "tokenizer/reasoning_parser.h"

namespace qs::tok {

namespace {
constexpr std::string_view kOpen = "<think>";
constexpr std::string_view kClose = "</think>";

// Length of the longest suffix of `s` that is a proper prefix of `tag`.
size_t partial_tag_suffix(std::string_view s, std::string_view tag) {
    for (size_t n = std::min(s.size(), tag.size() - 1); n > 0; --n)
        if (s.substr(s.size() - n) == tag.substr(0, n)) return n;
    return 0;
}
}  // namespace

void ReasoningParser::step(ReasoningDelta& out, bool final) {
    for (;;) {
        switch (state_) {
            case State::kContentStart: {
                // Leading whitespace then "<think>" opens a block; anything else is the answer.
                const size_t ws = buffer_.find_first_not_of(" \t\r\n");
                if (ws == std::string::npos) {
                    if (final) { out.content += buffer_; buffer_.clear(); }
                    return;
                }
                const std::string_view rest = std::string_view(buffer_).substr(ws);
                if (rest.substr(0, kOpen.size()) == kOpen) {
                    buffer_.erase(0, ws + kOpen.size());
                    state_ = State::kReasoningStart;
                    continue;
                }
                if (!final && rest.size() < kOpen.size() && kOpen.substr(0, rest.size()) == rest) return;
                state_ = State::kContent;
                continue;
            }
            case State::kReasoningStart:
                if (buffer_.empty()) return;
                if (buffer_[0] == '\n') buffer_.erase(0, 1);
                state_ = State::kReasoning;
                continue;
            case State::kReasoning: {
                const size_t close = buffer_.find(kClose);
                if (close != std::string::npos) {
                    out.reasoning += buffer_.substr(0, close);
                    buffer_.erase(0, close + kClose.size());
                    state_ = State::kAnswerStart;
                    continue;
                }
                const size_t hold = final ? 0 : partial_tag_suffix(buffer_, kClose);
                out.reasoning += buffer_.substr(0, buffer_.size() - hold);
                buffer_.erase(0, buffer_.size() - hold);
                return;
            }
            case State::kAnswerStart: {
                const size_t text = buffer_.find_first_not_of("\n");
                if (text == std::string::npos) {
                    buffer_.clear();
                    return;
                }
                buffer_.erase(0, text);
                state_ = State::kContent;
                continue;
            }
            case State::kContent:
                out.content += buffer_;
                buffer_.clear();
                return;
        }
    }
}

ReasoningDelta ReasoningParser::feed(std::string_view text) {
    buffer_.append(text);
    ReasoningDelta out;
    step(out, false);
    return out;
}

ReasoningDelta ReasoningParser::finish() {
    ReasoningDelta out;
    step(out, true);
    return out;
}

}  // namespace qs::tok

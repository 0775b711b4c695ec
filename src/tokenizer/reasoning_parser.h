// Splits model output into reasoning (inside <think> ... </think>) and answer content, as
// text streams in. Qwen3.5/3.6 prompts end with "<think>\n" (thinking on), so generation
// starts inside the block: construct with starts_in_reasoning = true. With thinking disabled
// (the prompt holds an empty think block) or for Qwen3 prompts, start outside; an opening
// <think> the model writes itself is then recognised at the start of the output.
// Tags split across feed() calls are handled by holding back any text that could still
// become a tag. Output conventions: the "\n" right after an opening tag is dropped, as are
// the newlines that separate </think> from the answer. One instance per sequence.
#pragma once

#include <string>
#include <string_view>

namespace qs::tok {

struct ReasoningDelta {
    std::string reasoning;
    std::string content;
    bool empty() const { return reasoning.empty() && content.empty(); }
};

class ReasoningParser {
public:
    explicit ReasoningParser(bool starts_in_reasoning)
        : state_(starts_in_reasoning ? State::kReasoningStart : State::kContentStart) {}

    ReasoningDelta feed(std::string_view text);
    // End of output: releases held-back text (an unfinished tag is plain text).
    ReasoningDelta finish();
    bool in_reasoning() const { return state_ == State::kReasoningStart || state_ == State::kReasoning; }

private:
    enum class State {
        kContentStart,    // nothing emitted yet; a <think> may still open (after whitespace)
        kReasoningStart,  // just inside <think>: drop one leading "\n"
        kReasoning,
        kAnswerStart,     // just after </think>: drop leading newlines
        kContent,
    };
    void step(ReasoningDelta& out, bool final);
    State state_;
    std::string buffer_;
};

}  // namespace qs::tok

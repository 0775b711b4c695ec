// Reasoning parser: every way of cutting the output into chunks (tags split anywhere) gives
// the same reasoning/content as feeding it whole, for each starting mode.
#include <gtest/gtest.h>

#include "tokenizer/reasoning_parser.h"

namespace qs::tok {
namespace {

ReasoningDelta run(bool starts_in_reasoning, const std::vector<std::string>& chunks) {
    ReasoningParser parser(starts_in_reasoning);
    ReasoningDelta all;
    for (const auto& c : chunks) {
        auto d = parser.feed(c);
        all.reasoning += d.reasoning;
        all.content += d.content;
    }
    auto d = parser.finish();
    all.reasoning += d.reasoning;
    all.content += d.content;
    return all;
}

void expect_split(bool start, const std::string& text, const std::string& reasoning, const std::string& content) {
    const auto whole = run(start, {text});
    EXPECT_EQ(whole.reasoning, reasoning) << text;
    EXPECT_EQ(whole.content, content) << text;
    for (size_t a = 0; a <= text.size(); ++a) {
        for (size_t b = a; b <= text.size(); b += 3) {
            const auto parts = run(start, {text.substr(0, a), text.substr(a, b - a), text.substr(b)});
            ASSERT_EQ(parts.reasoning, reasoning) << "cut at " << a << "," << b << ": " << text;
            ASSERT_EQ(parts.content, content) << "cut at " << a << "," << b << ": " << text;
        }
    }
}

TEST(ReasoningParser, PrefilledThinkTag) {
    // Qwen3.5/3.6 prompt ends with "<think>\n": output starts inside the block.
    expect_split(true, "Let me think.\n</think>\n\nThe answer is 4.", "Let me think.\n", "The answer is 4.");
    expect_split(true, "no end tag, all reasoning", "no end tag, all reasoning", "");
    expect_split(true, "a < b </thin not a tag</think>ok", "a < b </thin not a tag", "ok");
}

TEST(ReasoningParser, ModelWritesItsOwnOpenTag) {
    expect_split(false, "<think>\nhmm\n</think>\n\nhi", "hmm\n", "hi");
    expect_split(false, "  \n<think>x</think>y", "x", "y");
}

TEST(ReasoningParser, ThinkingDisabledIsAllContent) {
    expect_split(false, "Just the answer.", "", "Just the answer.");
    expect_split(false, "<thin", "", "<thin");
    expect_split(false, "answer with </think> inside", "", "answer with </think> inside");
    expect_split(false, "", "", "");
}

}  // namespace
}  // namespace qs::tok

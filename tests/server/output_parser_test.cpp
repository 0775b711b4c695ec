// The Qwen reasoning / tool-call splitter, fed whole and byte by byte.
#include <gtest/gtest.h>

#include "server/output_parser.h"

namespace qs {
namespace {

ParsedDelta run(const std::string& text, OutputParserOptions o, bool bytewise) {
    auto p = make_qwen_output_parser(o);
    ParsedDelta all;
    auto add = [&](ParsedDelta d) {
        all.reasoning += d.reasoning;
        all.content += d.content;
        for (auto& t : d.tool_calls) all.tool_calls.push_back(t);
    };
    if (bytewise)
        for (char c : text) add(p->feed(std::string(1, c)));
    else
        add(p->feed(text));
    add(p->finish());
    return all;
}

class OutputParserTest : public ::testing::TestWithParam<bool> {};

TEST_P(OutputParserTest, SplitsReasoningWhenPromptOpenedThink) {
    OutputParserOptions o;
    o.starts_in_reasoning = true;
    auto d = run("let me think</think>\n\nThe answer.", o, GetParam());
    EXPECT_EQ(d.reasoning, "let me think");
    EXPECT_EQ(d.content, "The answer.");
}

TEST_P(OutputParserTest, ExplicitThinkAtStart) {
    auto d = run("<think>hmm</think>ok", {}, GetParam());
    EXPECT_EQ(d.reasoning, "hmm");
    EXPECT_EQ(d.content, "ok");
}

TEST_P(OutputParserTest, PlainContentKeepsTagsAsText) {
    auto d = run("a < b and <tool_call>x</tool_call>", {}, GetParam());
    EXPECT_EQ(d.content, "a < b and <tool_call>x</tool_call>");
    EXPECT_TRUE(d.tool_calls.empty());
}

TEST_P(OutputParserTest, JsonToolCall) {
    OutputParserOptions o;
    o.parse_tool_calls = true;
    auto d = run("Sure.\n\n<tool_call>\n{\"name\": \"get\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>\n", o, GetParam());
    EXPECT_EQ(d.content, "Sure.");
    ASSERT_EQ(d.tool_calls.size(), 1u);
    EXPECT_EQ(d.tool_calls[0].name, "get");
    EXPECT_EQ(d.tool_calls[0].arguments, "{\"city\":\"Paris\"}");
    EXPECT_EQ(d.tool_calls[0].id.rfind("call_", 0), 0u);
}

TEST_P(OutputParserTest, XmlToolCallsTwo) {
    OutputParserOptions o;
    o.parse_tool_calls = true;
    o.starts_in_reasoning = true;
    auto d = run("r</think>\n\n<tool_call>\n<function=f>\n<parameter=a>\n12\n</parameter>\n<parameter=b>\nhi there\n</parameter>\n"
                 "</function>\n</tool_call>\n<tool_call>\n<function=g>\n</function>\n</tool_call>",
                 o, GetParam());
    EXPECT_EQ(d.reasoning, "r");
    EXPECT_EQ(d.content, "");
    ASSERT_EQ(d.tool_calls.size(), 2u);
    EXPECT_EQ(d.tool_calls[0].name, "f");
    EXPECT_EQ(d.tool_calls[0].arguments, "{\"a\":12,\"b\":\"hi there\"}");
    EXPECT_EQ(d.tool_calls[1].name, "g");
    EXPECT_EQ(d.tool_calls[1].arguments, "{}");
}

// Found by output_parser_fuzz: a JSON call with an empty name was released as a tool call. Like
// the XML form's, it stays text.
TEST_P(OutputParserTest, JsonToolCallWithoutANameStaysContent) {
    OutputParserOptions o;
    o.parse_tool_calls = true;
    const std::string text = "<tool_call>\n{\"name\": \"\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>";
    auto d = run(text, o, GetParam());
    EXPECT_TRUE(d.tool_calls.empty());
    EXPECT_EQ(d.content, text);
}

TEST_P(OutputParserTest, UnterminatedToolCallBecomesContent) {
    OutputParserOptions o;
    o.parse_tool_calls = true;
    auto d = run("x <tool_call>{\"name\"", o, GetParam());
    EXPECT_EQ(d.content, "x <tool_call>{\"name\"");
    EXPECT_TRUE(d.tool_calls.empty());
}

TEST_P(OutputParserTest, TrailingWhitespaceOfPlainContentKept) {
    auto d = run("hello \n", {}, GetParam());
    EXPECT_EQ(d.content, "hello \n");
}

INSTANTIATE_TEST_SUITE_P(WholeAndBytewise, OutputParserTest, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& info) { return info.param ? "Bytewise" : "Whole"; });

}  // namespace
}  // namespace qs

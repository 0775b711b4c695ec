// Tool-call parser: the Qwen3.5/3.6 XML format with schema-typed values and several calls, the
// Qwen3 JSON format, streaming at every cut point equal to one-shot, OpenAI chunk shape, and
// malformed output returned as content.
#include <gtest/gtest.h>

#include "tokenizer/tool_call_parser.h"

namespace qs::tok {
namespace {

using Json = nlohmann::ordered_json;

const char* kTools = R"([{"type": "function", "function": {"name": "get_weather", "parameters": {
  "type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"},
  "temp": {"type": "number"}, "metric": {"type": "boolean"}, "opts": {"type": "object"},
  "tags": {"type": "array"}, "maybe": {"type": ["integer", "null"]}}}}}])";

struct Outcome {
    std::string content;
    std::vector<ToolCall> calls;
    std::vector<ToolCallChunk> chunks;
};

Outcome run(ToolCallFormat format, const std::vector<std::string>& chunks) {
    ToolCallParser parser(format, ToolSchemas::from_text(kTools).value());
    Outcome o;
    auto take = [&](ToolParseDelta d) {
        o.content += d.content;
        for (auto& c : d.tool_calls) o.chunks.push_back(c);
    };
    for (const auto& c : chunks) take(parser.feed(c));
    take(parser.finish());
    o.calls = parser.calls();
    return o;
}

// Checks one-shot and all two-cut streamings agree; returns the one-shot outcome.
Outcome run_all_cuts(ToolCallFormat format, const std::string& text) {
    const Outcome whole = run(format, {text});
    for (size_t a = 0; a <= text.size(); a += 2) {
        for (size_t b = a; b <= text.size(); b += 7) {
            const Outcome o = run(format, {text.substr(0, a), text.substr(a, b - a), text.substr(b)});
            EXPECT_EQ(o.content, whole.content) << a << "," << b;
            EXPECT_EQ(o.calls.size(), whole.calls.size()) << a << "," << b;
            for (size_t i = 0; i < o.calls.size() && i < whole.calls.size(); ++i)
                EXPECT_EQ(o.calls[i].arguments, whole.calls[i].arguments);
            if (::testing::Test::HasFailure()) return whole;
        }
    }
    return whole;
}

TEST(ToolCallParser, XmlTypedParametersAndSeveralCalls) {
    const std::string text =
        "I'll check.\n\n<tool_call>\n<function=get_weather>\n<parameter=city>\nSan Francisco\n</parameter>\n"
        "<parameter=days>\n3\n</parameter>\n<parameter=temp>\n21.5\n</parameter>\n<parameter=metric>\nTrue\n"
        "</parameter>\n<parameter=opts>\n{\"a\": [1, 2]}\n</parameter>\n<parameter=tags>\n[\"x\"]\n</parameter>\n"
        "<parameter=maybe>\nnull\n</parameter>\n<parameter=unknown>\n42\n</parameter>\n</function>\n</tool_call>\n"
        "<tool_call>\n<function=other>\n<parameter=q>\nmulti\nline\n</parameter>\n</function>\n</tool_call>";
    const Outcome o = run_all_cuts(ToolCallFormat::kQwen35Xml, text);
    EXPECT_EQ(o.content, "I'll check.\n\n");
    ASSERT_EQ(o.calls.size(), 2u);
    EXPECT_EQ(o.calls[0].name, "get_weather");
    EXPECT_EQ(o.calls[0].arguments,
              R"({"city": "San Francisco", "days": 3, "temp": 21.5, "metric": true, "opts": {"a": [1, 2]}, "tags": ["x"], "maybe": null, "unknown": "42"})");
    EXPECT_EQ(o.calls[1].arguments, R"({"q": "multi\nline"})");
    ASSERT_EQ(o.chunks.size(), 4u);
    const Json first = o.chunks[0].to_json();
    EXPECT_EQ(first["index"], 0);
    EXPECT_EQ(first["type"], "function");
    EXPECT_EQ(first["function"]["name"], "get_weather");
    EXPECT_EQ(first["id"].get<std::string>().rfind("call_", 0), 0u);
    EXPECT_EQ(o.chunks[1].to_json()["function"]["arguments"], o.calls[0].arguments);
    EXPECT_EQ(o.chunks[3].to_json()["index"], 1);
}

TEST(ToolCallParser, ConversionFailuresKeepText) {
    const Outcome o = run(ToolCallFormat::kQwen35Xml,
                          {"<tool_call><function=get_weather><parameter=days>many</parameter>"
                           "<parameter=metric>yes</parameter></function></tool_call>"});
    ASSERT_EQ(o.calls.size(), 1u);
    EXPECT_EQ(o.calls[0].arguments, R"({"days": "many", "metric": "yes"})");
}

// Found by tests/fuzz/tool_reasoning_fuzz: strtod reads "nan" and "inf", which no JSON can hold,
// so the arguments were not JSON ({"temp": nan}). Non-finite numbers stay text.
TEST(ToolCallParser, NonFiniteNumbersKeepText) {
    const Outcome o = run(ToolCallFormat::kQwen35Xml,
                          {"<tool_call><function=get_weather><parameter=temp>nan</parameter>"
                           "<parameter=days>1</parameter></function></tool_call>"
                           "<tool_call><function=get_weather><parameter=temp>-Infinity</parameter>"
                           "</function></tool_call>"});
    ASSERT_EQ(o.calls.size(), 2u);
    EXPECT_EQ(o.calls[0].arguments, R"({"temp": "nan", "days": 1})");
    EXPECT_EQ(o.calls[1].arguments, R"({"temp": "-Infinity"})");
}

TEST(ToolCallParser, MalformedOutputIsContent) {
    for (const std::string& text : {std::string("<tool_call>\n<function=f>\n<parameter=x>\n1"),  // truncated
                                   std::string("<tool_call>not xml at all</tool_call> tail"),
                                   std::string("<tool_call><function=>x</function></tool_call>"),
                                   std::string("text <tool_ca")}) {
        const Outcome o = run_all_cuts(ToolCallFormat::kQwen35Xml, text);
        EXPECT_TRUE(o.calls.empty()) << text;
        EXPECT_EQ(o.content, text);
    }
}

TEST(ToolCallParser, Qwen3JsonFormat) {
    const std::string text =
        "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"days\": 2}}\n</tool_call>\n"
        "<tool_call>\n{\"name\": \"f\", \"arguments\": \"{\\\"x\\\": 1.5}\"}\n</tool_call>";
    const Outcome o = run_all_cuts(ToolCallFormat::kQwen3Json, text);
    EXPECT_EQ(o.content, "");
    ASSERT_EQ(o.calls.size(), 2u);
    EXPECT_EQ(o.calls[0].arguments, R"({"city": "Paris", "days": 2})");
    EXPECT_EQ(o.calls[1].arguments, R"({"x": 1.5})");
    const Outcome bad = run(ToolCallFormat::kQwen3Json, {"<tool_call>{\"name\": 3}</tool_call>"});
    EXPECT_TRUE(bad.calls.empty());
    EXPECT_EQ(bad.content, "<tool_call>{\"name\": 3}</tool_call>");
}

TEST(ToolSchemas, InvalidSchemaIsAClearError) {
    auto bad = ToolSchemas::from_text("[{\"type\": \"function\", ");
    ASSERT_FALSE(bad.is_ok());
    EXPECT_NE(bad.status().message().find("not valid JSON"), std::string::npos);
    auto no_name = ToolSchemas::from_text(R"([{"type": "function", "function": {}}])");
    ASSERT_FALSE(no_name.is_ok());
    EXPECT_NE(no_name.status().message().find("tools[0]"), std::string::npos);
}

}  // namespace
}  // namespace qs::tok

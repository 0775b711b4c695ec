// Chat templates: a few fixed renders from model.md §5.2 and the errors for bad input. The
// parity sweep against jinja2 is tools/chat_template_parity.py (ctest chat_template_parity_*).
#include <gtest/gtest.h>

#include "tokenizer/chat_template.h"
#include "tokenizer/python_format.h"

namespace qs::tok {
namespace {

using Json = nlohmann::ordered_json;

TEST(ChatTemplate, Qwen36GenerationPrompts) {
    const ChatTemplate t(ChatFormat::kQwen35);
    const Json msgs = Json::parse(R"([{"role": "user", "content": "hello"}])");
    ChatOptions on;
    EXPECT_EQ(t.render(msgs, nullptr, on).value(),
              "<|im_start|>user\nhello<|im_end|>\n<|im_start|>assistant\n<think>\n");
    ChatOptions off;
    off.enable_thinking = false;
    EXPECT_EQ(t.render(msgs, nullptr, off).value(),
              "<|im_start|>user\nhello<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n");
}

TEST(ChatTemplate, Qwen36ToolCallsAndResponses) {
    const ChatTemplate t(ChatFormat::kQwen35);
    const Json msgs = Json::parse(R"([
      {"role": "user", "content": "weather?"},
      {"role": "assistant", "content": "", "tool_calls": [{"type": "function", "function":
        {"name": "get_weather", "arguments": "{\"city\": \"Paris\", \"opts\": {\"a\": 1}}"}}]},
      {"role": "tool", "content": "sunny"}, {"role": "tool", "content": "20C"}])");
    ChatOptions o;
    o.add_generation_prompt = false;
    EXPECT_EQ(t.render(msgs, nullptr, o).value(),
              "<|im_start|>user\nweather?<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"
              "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n"
              "<parameter=opts>\n{\"a\": 1}\n</parameter>\n</function>\n</tool_call><|im_end|>\n"
              "<|im_start|>user\n<tool_response>\nsunny\n</tool_response>\n<tool_response>\n20C\n"
              "</tool_response><|im_end|>\n");
}

TEST(ChatTemplate, ErrorsNameTheProblem) {
    const ChatTemplate t(ChatFormat::kQwen35);
    auto err = [&](const char* messages) {
        auto r = t.render(Json::parse(messages), nullptr, ChatOptions{});
        EXPECT_FALSE(r.is_ok()) << messages;
        return r.is_ok() ? std::string() : r.status().message();
    };
    EXPECT_NE(err("[]").find("no messages"), std::string::npos);
    EXPECT_NE(err(R"([{"role": "user", "content": 5}])").find("messages[0].content"), std::string::npos);
    EXPECT_NE(err(R"([{"role": "user", "content": "a"}, {"role": "system", "content": "b"}])").find("first"), std::string::npos);
    EXPECT_NE(err(R"([{"role": "user", "content": "a"}, {"role": "bot", "content": "b"}])").find("bot"), std::string::npos);
    EXPECT_NE(err(R"([{"role": "assistant", "content": "a"}])").find("no user query"), std::string::npos);
    EXPECT_NE(err(R"({"role": "user"})").find("array"), std::string::npos);
    EXPECT_NE(err(R"([{"role": 1}])").find("role"), std::string::npos);
    EXPECT_FALSE(ChatTemplate::from_name("llama").is_ok());
    EXPECT_FALSE(ChatTemplate::detect("{{ messages }}").is_ok());
}

TEST(PythonFormat, FloatReprAndJson) {
    EXPECT_EQ(python_float_repr(1.0), "1.0");
    EXPECT_EQ(python_float_repr(0.1), "0.1");
    EXPECT_EQ(python_float_repr(1e-05), "1e-05");
    EXPECT_EQ(python_float_repr(0.0001), "0.0001");
    EXPECT_EQ(python_float_repr(1e16), "1e+16");
    EXPECT_EQ(python_float_repr(1234567890123456.0), "1234567890123456.0");
    EXPECT_EQ(python_float_repr(-2.5e-300), "-2.5e-300");
    EXPECT_EQ(python_json_dumps(Json::parse(R"({"b": [1, 2.0, null, true], "a": "é\n\u0001"})")),
              "{\"b\": [1, 2.0, null, true], \"a\": \"é\\n\\u0001\"}");
    EXPECT_EQ(python_strip("\u3000 x \x1f"), "x");
}

}  // namespace
}  // namespace qs::tok

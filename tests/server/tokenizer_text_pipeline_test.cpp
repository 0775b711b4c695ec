// The real tokenizer behind the seam (Qwen3 tokenizer from shared/data; skipped if absent):
// chat rendering + encode round trip, EOS ids, and reasoning/tool-call parsing via src/tokenizer.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>

#include "server/tokenizer_text_pipeline.h"

namespace qs {
namespace {

// shared/ sits beside the clone in CI; QS_SHARED_DIR overrides (as in the tokenizer tests).
std::string qwen3_dir() {
    const char* shared = std::getenv("QS_SHARED_DIR");
    return (shared ? std::string(shared) : std::string(QS_SOURCE_DIR) + "/../shared") + "/data/tokenizers/qwen3";
}

TEST(TokenizerTextPipeline, Qwen3ChatAndParsers) {
    if (!std::filesystem::exists(qwen3_dir() + "/tokenizer.json")) GTEST_SKIP() << "no " << qwen3_dir();
    auto p = TokenizerTextPipeline::load(qwen3_dir());
    ASSERT_TRUE(p.is_ok()) << p.status().message();
    const auto& t = *p.value();
    auto msgs = nlohmann::ordered_json::parse(R"([{"role":"user","content":"hi"}])");
    auto text = t.render_chat(msgs, nullptr, {});
    ASSERT_TRUE(text.is_ok()) << text.status().message();
    EXPECT_NE(text.value().find("<|im_start|>assistant\n"), std::string::npos);
    auto ids = t.encode(text.value());
    EXPECT_EQ(t.decode(ids), text.value());
    EXPECT_FALSE(t.eos_token_ids().empty());
    EXPECT_FALSE(t.prompt_opens_reasoning({}));  // Qwen3 lets the model open <think>

    OutputParserOptions o;
    o.parse_tool_calls = true;
    o.tools = nlohmann::ordered_json::parse(R"([{"type":"function","function":{"name":"f","parameters":{}}}])");
    auto parser = t.make_output_parser(o);
    ParsedDelta all;
    for (const char* piece : {"<think>\nhm", "m</think>\n\nok <tool", "_call>\n{\"name\": \"f\", \"arguments\": {\"x\": 1}}\n</tool_call>"}) {
        ParsedDelta d = parser->feed(piece);
        all.reasoning += d.reasoning;
        all.content += d.content;
        for (auto& c : d.tool_calls) all.tool_calls.push_back(c);
    }
    ParsedDelta d = parser->finish();
    all.content += d.content;
    for (auto& c : d.tool_calls) all.tool_calls.push_back(c);
    EXPECT_EQ(all.reasoning, "hmm");
    EXPECT_EQ(all.content.substr(0, 2), "ok");
    ASSERT_EQ(all.tool_calls.size(), 1u);
    EXPECT_EQ(all.tool_calls[0].name, "f");
    EXPECT_EQ(nlohmann::json::parse(all.tool_calls[0].arguments), nlohmann::json::parse(R"({"x":1})"));
}

// --chat-template FILE of another family: rendered by the Jinja interpreter with the tokenizer's
// special tokens and every chat_template_kwargs key; its raise_exception is the error message;
// a template the interpreter cannot parse fails at load, naming the file and the line.
TEST(TokenizerTextPipeline, JinjaTemplateFile) {
    const std::string tiny = std::string(QS_SOURCE_DIR) + "/models/qwen36-tiny";
    const std::string dir = ::testing::TempDir();
    auto write = [&](const std::string& name, const std::string& text) {
        const std::string path = dir + "/" + name;
        std::FILE* f = std::fopen(path.c_str(), "wb");
        std::fwrite(text.data(), 1, text.size(), f);
        std::fclose(f);
        return path;
    };
    const std::string good = write("good.jinja",
        "{% for m in messages %}{% if m.role == 'system' %}{{ raise_exception('no system role') }}{% endif %}"
        "[{{ m.role }}]{{ m.content }}{{ eos_token }}{% endfor %}{% if add_generation_prompt %}[assistant]{% endif %}"
        "{{ greeting | default('') }}");
    auto p = TokenizerTextPipeline::load(tiny, good);
    ASSERT_TRUE(p.is_ok()) << p.status().message();
    EXPECT_TRUE(p.value()->renders_with_jinja());
    EXPECT_TRUE(p.value()->reads_any_template_kwarg());
    EXPECT_FALSE(p.value()->prompt_opens_reasoning({}));  // not a Qwen template: <think> is found in the output
    ChatRenderOptions o;
    o.template_kwargs = nlohmann::ordered_json::parse(R"({"greeting": "hi"})");
    auto text = p.value()->render_chat(nlohmann::ordered_json::parse(R"([{"role":"user","content":"q"}])"), nullptr, o);
    ASSERT_TRUE(text.is_ok()) << text.status().message();
    EXPECT_EQ(text.value(), "[user]q<|im_end|>[assistant]hi");
    auto raised = p.value()->render_chat(nlohmann::ordered_json::parse(R"([{"role":"system","content":"s"}])"), nullptr, {});
    ASSERT_FALSE(raised.is_ok());
    EXPECT_EQ(raised.status().kind(), ErrorKind::kInvalidArgument);
    EXPECT_EQ(raised.status().message(), "no system role");

    const std::string bad = write("bad.jinja", "ok\n{% include 'other.jinja' %}");
    auto refused = TokenizerTextPipeline::load(tiny, bad);
    ASSERT_FALSE(refused.is_ok());
    EXPECT_NE(refused.status().message().find("bad.jinja"), std::string::npos) << refused.status().message();
    EXPECT_NE(refused.status().message().find("line 2: unsupported template tag '{% include %}'"), std::string::npos)
        << refused.status().message();
}

}  // namespace
}  // namespace qs

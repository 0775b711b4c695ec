// Validation of OpenAI request bodies: every rejection names its parameter.
#include <gtest/gtest.h>

#include "server/openai_parse.h"

namespace qs {
namespace {

const std::vector<std::string> kModels = {"m"};

std::optional<ApiError> chat(const std::string& extra, GenerationSpec* out = nullptr) {
    GenerationSpec s;
    auto e = parse_generation_request(ApiKind::kChat,
                                      R"({"model":"m","messages":[{"role":"user","content":"hi"}])" + extra + "}", kModels, s);
    if (out) *out = s;
    return e;
}

TEST(OpenAiParse, AcceptsAFullChatRequest) {
    GenerationSpec s;
    auto e = chat(R"(,"temperature":0.5,"top_p":0.9,"top_k":20,"min_p":0.1,"max_completion_tokens":7,"n":2,"stop":["x","y"],
                    "seed":3,"logprobs":true,"top_logprobs":2,"presence_penalty":1,"frequency_penalty":-1,"stream":true,
                    "stream_options":{"include_usage":true},"response_format":{"type":"json_object"},
                    "chat_template_kwargs":{"enable_thinking":false},
                    "tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object"}}}],"tool_choice":"auto")",
                  &s);
    ASSERT_FALSE(e) << e->message;
    EXPECT_EQ(s.params.max_tokens, 7);
    EXPECT_TRUE(s.max_tokens_given);
    EXPECT_EQ(s.params.n, 2);
    EXPECT_EQ(s.params.top_k, 20);
    EXPECT_EQ(s.params.logprobs, 2);
    EXPECT_EQ(*s.params.seed, 3u);
    EXPECT_EQ(s.params.stop.size(), 2u);
    EXPECT_TRUE(s.stream && s.include_usage && s.json_object && !s.enable_thinking);
    EXPECT_TRUE(s.tools.is_array());
}

struct BadCase {
    const char* extra;
    const char* param;
    int status;
};

TEST(OpenAiParse, RejectsWithParamNames) {
    const BadCase cases[] = {
        {R"(,"temperature":"hot")", "temperature", 400},
        {R"(,"temperature":-0.1)", "temperature", 400},
        {R"(,"top_p":0)", "top_p", 400},
        {R"(,"max_tokens":0)", "max_tokens", 400},
        {R"(,"max_tokens":1.5)", "max_tokens", 400},
        {R"(,"n":0)", "n", 400},
        {R"(,"n":1000)", "n", 400},
        {R"(,"stop":[1])", "stop", 400},
        {R"(,"stop":"")", "stop", 400},
        {R"(,"top_logprobs":3)", "top_logprobs", 400},
        {R"(,"logprobs":true,"top_logprobs":50)", "top_logprobs", 400},
        {R"(,"stream_options":{"include_usage":true})", "stream_options", 400},
        {R"(,"response_format":{"type":"json_schema"})", "response_format", 400},
        {R"(,"presence_penalty":3)", "presence_penalty", 400},
        {R"(,"tools":[{"type":"function"}])", "tools[0]", 400},
        {R"(,"tool_choice":"required","tools":[{"type":"function","function":{"name":"f"}}])", "tool_choice", 400},
        {R"(,"tool_choice":"auto")", "tool_choice", 400},
        {R"(,"chat_template_kwargs":{"enable_thinking":"no"})", "enable_thinking", 400},
        {R"(,"seed":"x")", "seed", 400},
    };
    for (const auto& c : cases) {
        auto e = chat(c.extra);
        ASSERT_TRUE(e) << c.extra;
        EXPECT_EQ(e->param, c.param) << c.extra << " → " << e->message;
        EXPECT_EQ(e->http_status, c.status) << c.extra;
        EXPECT_EQ(e->type, "invalid_request_error");
    }
}

TEST(OpenAiParse, MessagesAndModel) {
    GenerationSpec s;
    auto e = parse_generation_request(ApiKind::kChat, R"({"model":"m","messages":[]})", kModels, s);
    ASSERT_TRUE(e);
    EXPECT_EQ(e->param, "messages");
    e = parse_generation_request(ApiKind::kChat, R"({"model":"m","messages":[{"role":"bot","content":"x"}]})", kModels, s);
    ASSERT_TRUE(e);
    EXPECT_EQ(e->param, "messages[0].role");
    e = parse_generation_request(ApiKind::kChat, R"({"model":"other","messages":[{"role":"user","content":"x"}]})", kModels, s);
    ASSERT_TRUE(e);
    EXPECT_EQ(e->http_status, 404);
    EXPECT_EQ(e->code, "model_not_found");
    e = parse_generation_request(ApiKind::kChat, R"({"messages":[{"role":"user","content":"x"}]})", kModels, s);
    ASSERT_TRUE(e);
    EXPECT_EQ(e->param, "model");
    e = parse_generation_request(ApiKind::kChat, R"({"model":"m",)", kModels, s);
    ASSERT_TRUE(e);
    EXPECT_NE(e->message.find("not valid JSON"), std::string::npos);
    e = parse_generation_request(ApiKind::kChat, R"([1,2])", kModels, s);
    ASSERT_TRUE(e);
}

TEST(OpenAiParse, CompletionPrompts) {
    GenerationSpec s;
    EXPECT_FALSE(parse_generation_request(ApiKind::kCompletion, R"({"model":"m","prompt":"hi","logprobs":2})", kModels, s));
    EXPECT_EQ(*s.prompt_text, "hi");
    EXPECT_EQ(s.params.logprobs, 2);
    GenerationSpec t;
    EXPECT_FALSE(parse_generation_request(ApiKind::kCompletion, R"({"model":"m","prompt":[1,2,3]})", kModels, t));
    EXPECT_EQ(t.prompt_ids.size(), 3u);
    GenerationSpec u;
    auto e = parse_generation_request(ApiKind::kCompletion, R"({"model":"m","prompt":["a","b"]})", kModels, u);
    ASSERT_TRUE(e);
    EXPECT_EQ(e->code, "unsupported_value");
    e = parse_generation_request(ApiKind::kCompletion, R"({"model":"m","prompt":"a","echo":true})", kModels, u);
    ASSERT_TRUE(e);
    EXPECT_EQ(e->param, "echo");
    e = parse_generation_request(ApiKind::kCompletion, R"({"model":"m","prompt":[-1]})", kModels, u);
    ASSERT_TRUE(e);
    EXPECT_EQ(e->param, "prompt");
}

TEST(OpenAiParse, ErrorBodyShape) {
    ApiError e = ApiError::bad_request("bad thing", "x");
    auto j = nlohmann::json::parse(api_error_body(e));
    EXPECT_EQ(j["error"]["message"], "bad thing");
    EXPECT_EQ(j["error"]["type"], "invalid_request_error");
    EXPECT_EQ(j["error"]["param"], "x");
    EXPECT_TRUE(j["error"]["code"].is_null());
    ApiError busy = api_error_from_status(Status(ErrorKind::kResourceExhausted, "full"));
    EXPECT_EQ(busy.http_status, 429);
    EXPECT_EQ(busy.retry_after_s, 1);
}

}  // namespace
}  // namespace qs

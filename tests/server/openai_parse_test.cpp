// Validation of OpenAI request bodies: every rejection names its parameter.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "../common/test_files.h"
#include "server/openai_parse.h"
#include "server/unsupported_fields.h"

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

std::optional<ApiError> completion(const std::string& extra, GenerationSpec* out = nullptr) {
    GenerationSpec s;
    auto e = parse_generation_request(ApiKind::kCompletion, R"({"model":"m","prompt":"hi")" + extra + "}", kModels, s);
    if (out) *out = s;
    return e;
}

std::optional<ApiError> request(ApiKind kind, const std::string& extra, GenerationSpec* out = nullptr) {
    return kind == ApiKind::kChat ? chat(extra, out) : completion(extra, out);
}

const char* kind_name(ApiKind kind) { return kind == ApiKind::kChat ? "chat" : "completion"; }

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
    EXPECT_TRUE(s.stream && s.include_usage && s.json_object && !s.chat_render.enable_thinking);
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
        {R"(,"response_format":{"type":"json_schema"})", "response_format.json_schema", 400},
        {R"(,"response_format":{"type":"json_schema","json_schema":{"name":"x"}})", "response_format.json_schema.schema", 400},
        {R"(,"response_format":{"type":"json_schema","json_schema":{"schema":[1]}})", "response_format.json_schema.schema", 400},
        {R"(,"presence_penalty":3)", "presence_penalty", 400},
        {R"(,"tools":[{"type":"function"}])", "tools[0]", 400},
        // A non-string "type" (found by openai_parse_fuzz: json::value threw on it).
        {R"(,"tools":[{"type":{"name":"f"},"function":{"name":"f"}}])", "tools[0]", 400},
        {R"(,"tool_choice":{"type":["function"],"function":{"name":"f"}},"tools":[{"type":"function","function":{"name":"f"}}])", "tool_choice", 400},
        {R"(,"tool_choice":"sometimes","tools":[{"type":"function","function":{"name":"f"}}])", "tool_choice", 400},
        {R"(,"tool_choice":{"type":"function"},"tools":[{"type":"function","function":{"name":"f"}}])", "tool_choice", 400},
        {R"(,"structured_outputs":{"regex":"a","choice":["b"]})", "structured_outputs", 400},
        {R"(,"structured_outputs":{})", "structured_outputs", 400},
        {R"(,"structured_outputs":{"jsn":{}})", "structured_outputs.jsn", 400},
        {R"(,"structured_outputs":"a+")", "structured_outputs", 400},
        {R"(,"guided_json":"{not json")", "guided_json", 400},
        {R"(,"guided_json":[1])", "guided_json", 400},
        {R"(,"guided_choice":[])", "guided_choice", 400},
        {R"(,"guided_choice":["a",""])", "guided_choice", 400},
        {R"(,"guided_regex":"")", "guided_regex", 400},
        {R"(,"guided_grammar":5)", "guided_grammar", 400},
        {R"(,"response_format":{"type":"json_object"},"guided_regex":"a+")", "guided_regex", 400},
        {R"(,"guided_regex":"a+","guided_choice":["a"])", "guided_choice", 400},
        {R"(,"tool_choice":"required","tools":[{"type":"function","function":{"name":"f"}}],"guided_regex":"a")", "guided_regex", 400},
        {R"(,"tools":[{"type":"function","function":{"name":"f","strict":"yes"}}])", "tools[0].function.strict", 400},
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

TEST(OpenAiParse, StructuredOutputFields) {
    using K = grammar::GrammarSpec::Kind;
    struct Case {
        ApiKind kind;
        const char* extra;
        K want;
        const char* param;
        const char* text;  // the grammar's text ("" when not checked)
    };
    const Case cases[] = {
        {ApiKind::kChat, R"(,"response_format":{"type":"json_object"})", K::kJsonObject, "response_format", ""},
        {ApiKind::kChat, R"(,"response_format":{"type":"json_schema","json_schema":{"name":"x","strict":true,"schema":{"type":"integer"}}})",
         K::kJsonSchema, "response_format", R"({"type":"integer"})"},
        {ApiKind::kCompletion, R"(,"response_format":{"type":"json_schema","json_schema":{"schema":{"type":"string"}}})",
         K::kJsonSchema, "response_format", R"({"type":"string"})"},
        {ApiKind::kChat, R"(,"structured_outputs":{"json":{"type":"boolean"}})", K::kJsonSchema, "structured_outputs", R"({"type":"boolean"})"},
        {ApiKind::kChat, R"(,"structured_outputs":{"json":"{\"type\":\"null\"}"})", K::kJsonSchema, "structured_outputs", R"({"type":"null"})"},
        {ApiKind::kCompletion, R"(,"structured_outputs":{"regex":"a+b","disable_fallback":true})", K::kRegex, "structured_outputs", "a+b"},
        {ApiKind::kChat, R"(,"structured_outputs":{"choice":["x","y"]})", K::kChoice, "structured_outputs", ""},
        {ApiKind::kChat, R"(,"structured_outputs":{"grammar":"root ::= \"a\""})", K::kGrammar, "structured_outputs", R"(root ::= "a")"},
        {ApiKind::kChat, R"(,"structured_outputs":{"json_object":true,"regex":null})", K::kJsonObject, "structured_outputs", ""},
        {ApiKind::kChat, R"(,"guided_json":{"type":"array"},"guided_decoding_backend":"xgrammar")", K::kJsonSchema, "guided_json", R"({"type":"array"})"},
        {ApiKind::kCompletion, R"(,"guided_regex":"[0-9]+")", K::kRegex, "guided_regex", "[0-9]+"},
        {ApiKind::kChat, R"(,"guided_choice":["a b","c"])", K::kChoice, "guided_choice", ""},
        {ApiKind::kCompletion, R"(,"guided_grammar":"start: \"x\"")", K::kGrammar, "guided_grammar", R"(start: "x")"},
        {ApiKind::kChat, R"(,"response_format":{"type":"text"},"guided_regex":"a")", K::kRegex, "guided_regex", "a"},
    };
    for (const Case& c : cases) {
        GenerationSpec s;
        auto e = request(c.kind, c.extra, &s);
        ASSERT_FALSE(e) << c.extra << ": " << e->message;
        ASSERT_TRUE(s.grammar.has_value()) << c.extra;
        EXPECT_EQ(s.grammar->kind, c.want) << c.extra;
        EXPECT_EQ(s.grammar_param, c.param) << c.extra;
        if (*c.text) {
            // JSON texts compare as parsed JSON; regex, choice and grammar texts as written.
            auto canonical = [](const std::string& t) {
                const auto j = nlohmann::json::parse(t, nullptr, false);
                return j.is_discarded() ? t : j.dump();
            };
            EXPECT_EQ(canonical(s.grammar->text), canonical(c.text)) << c.extra;
        }
    }
    GenerationSpec s;
    ASSERT_FALSE(chat(R"(,"guided_choice":["a b","c"],"structured_outputs":null)", &s));
    EXPECT_EQ(s.grammar->choices, (std::vector<std::string>{"a b", "c"}));
    ASSERT_FALSE(chat(R"(,"structured_outputs":{"json":{},"disable_any_whitespace":true})", &s));
    EXPECT_FALSE(s.grammar->any_whitespace);
    // tool_choice: recorded; its grammar is built from the tools at submit.
    const std::string tools = R"(,"tools":[{"type":"function","function":{"name":"f","strict":true}}])";
    ASSERT_FALSE(chat(tools + R"(,"tool_choice":"required")", &s));
    EXPECT_TRUE(s.tool_choice_required);
    EXPECT_EQ(s.grammar_param, "tool_choice");
    EXPECT_FALSE(s.grammar.has_value());
    ASSERT_FALSE(chat(tools + R"(,"tool_choice":{"type":"function","function":{"name":"f"}})", &s));
    EXPECT_EQ(s.tool_choice_function, "f");
    EXPECT_EQ(s.grammar_param, "tool_choice");
    // No constraint.
    ASSERT_FALSE(chat(R"(,"response_format":{"type":"text"},"tool_choice":"auto","tools":[{"type":"function","function":{"name":"f"}}])", &s));
    EXPECT_TRUE(s.grammar_param.empty());
    EXPECT_FALSE(s.grammar.has_value());
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
    ASSERT_EQ(s.prompts.size(), 1u);
    EXPECT_EQ(*s.prompts[0].text, "hi");
    EXPECT_EQ(s.params.logprobs, 2);
    GenerationSpec t;
    EXPECT_FALSE(parse_generation_request(ApiKind::kCompletion, R"({"model":"m","prompt":[1,2,3]})", kModels, t));
    ASSERT_EQ(t.prompts.size(), 1u);
    EXPECT_FALSE(t.prompts[0].text);
    EXPECT_EQ(t.prompts[0].ids, (std::vector<int32_t>{1, 2, 3}));
    // One-element lists are one prompt; longer lists are a batch, strings and token lists mixed
    // (vLLM takes both).
    GenerationSpec one;
    EXPECT_FALSE(parse_generation_request(ApiKind::kCompletion, R"({"model":"m","prompt":[[7,8]]})", kModels, one));
    ASSERT_EQ(one.prompts.size(), 1u);
    EXPECT_EQ(one.prompts[0].ids, (std::vector<int32_t>{7, 8}));
    GenerationSpec batch;
    EXPECT_FALSE(parse_generation_request(ApiKind::kCompletion, R"({"model":"m","prompt":["a",[5],"b c"],"n":2})",
                                          kModels, batch));
    ASSERT_EQ(batch.prompts.size(), 3u);
    EXPECT_EQ(*batch.prompts[0].text, "a");
    EXPECT_EQ(batch.prompts[1].ids, (std::vector<int32_t>{5}));
    EXPECT_EQ(*batch.prompts[2].text, "b c");
    EXPECT_EQ(batch.params.n, 2);
    GenerationSpec u;
    // A bad member of a batch is named by its index.
    for (const char* bad : {R"(["a",""])", R"(["a",[]])", R"(["a",3])", R"([[1],[-1]])", R"(["a",{"x":1}])"}) {
        auto e = parse_generation_request(ApiKind::kCompletion, std::string(R"({"model":"m","prompt":)") + bad + "}",
                                          kModels, u);
        ASSERT_TRUE(e) << bad;
        EXPECT_EQ(e->param, "prompt") << bad;
        EXPECT_NE(e->message.find("prompt[1]"), std::string::npos) << bad << ": " << e->message;
    }
    std::string many = R"({"model":"m","prompt":[)";
    for (size_t i = 0; i <= kMaxBatchedPrompts; ++i) many += i ? R"(,"x")" : R"("x")";
    auto e = parse_generation_request(ApiKind::kCompletion, many + "]}", kModels, u);
    ASSERT_TRUE(e);
    EXPECT_EQ(e->param, "prompt");
    EXPECT_NE(e->message.find("at most 256"), std::string::npos) << e->message;
    e = parse_generation_request(ApiKind::kCompletion, R"({"model":"m","prompt":"a","echo":true,"logprobs":1})", kModels, u);
    ASSERT_TRUE(e);
    EXPECT_EQ(e->param, "echo");
    EXPECT_EQ(e->code, "unsupported_value");
    e = parse_generation_request(ApiKind::kCompletion, R"({"model":"m","prompt":[-1]})", kModels, u);
    ASSERT_TRUE(e);
    EXPECT_EQ(e->param, "prompt");
}

TEST(OpenAiParse, LogitBiasAndMinTokens) {
    for (ApiKind kind : {ApiKind::kChat, ApiKind::kCompletion}) {
        GenerationSpec s;
        auto e = request(kind, R"(,"logit_bias":{"65":100,"7":-5.5,"0012":0,"3":-100},"min_tokens":10,"max_tokens":10)", &s);
        ASSERT_FALSE(e) << kind_name(kind) << ": " << e->message;
        ASSERT_EQ(s.params.logit_bias.size(), 4u);
        EXPECT_EQ(s.params.logit_bias[0].token, 65);
        EXPECT_EQ(s.params.logit_bias[0].bias, 100.0f);
        EXPECT_EQ(s.params.logit_bias[1].token, 7);
        EXPECT_EQ(s.params.logit_bias[1].bias, -5.5f);
        EXPECT_EQ(s.params.logit_bias[2].token, 12);
        EXPECT_EQ(s.params.logit_bias[2].bias, 0.0f);
        EXPECT_EQ(s.params.logit_bias[3].bias, -100.0f);
        EXPECT_EQ(s.params.min_tokens, 10);
        // Defaults; null is absent.
        GenerationSpec d;
        ASSERT_FALSE(request(kind, R"(,"logit_bias":null,"min_tokens":null)", &d));
        EXPECT_TRUE(d.params.logit_bias.empty());
        EXPECT_EQ(d.params.min_tokens, 0);
        ASSERT_FALSE(request(kind, R"(,"logit_bias":{})", &d));
        EXPECT_TRUE(d.params.logit_bias.empty());
        // Without max_tokens the limit is the context left after the prompt: checked at submit.
        GenerationSpec big;
        ASSERT_FALSE(request(kind, R"(,"min_tokens":5000)", &big));
        EXPECT_EQ(big.params.min_tokens, 5000);
        // The most entries allowed.
        std::string many = R"(,"logit_bias":{)";
        for (int i = 0; i < 1024; ++i) many += (i ? "," : "") + ("\"" + std::to_string(i) + "\":1");
        GenerationSpec m;
        ASSERT_FALSE(request(kind, many + "}", &m));
        EXPECT_EQ(m.params.logit_bias.size(), 1024u);
    }
}

TEST(OpenAiParse, RejectsBadLogitBiasAndMinTokens) {
    std::string too_many = R"(,"logit_bias":{)";
    for (int i = 0; i < 1025; ++i) too_many += (i ? "," : "") + ("\"" + std::to_string(i) + "\":1");
    too_many += "}";
    const std::pair<std::string, const char*> cases[] = {
        {R"(,"logit_bias":[1])", "logit_bias"},
        {R"(,"logit_bias":"65:1")", "logit_bias"},
        {R"(,"logit_bias":{"x":1})", "logit_bias"},
        {R"(,"logit_bias":{"-1":1})", "logit_bias"},
        {R"(,"logit_bias":{"1.5":1})", "logit_bias"},
        {R"(,"logit_bias":{"":1})", "logit_bias"},
        {R"(,"logit_bias":{" 1":1})", "logit_bias"},
        {R"(,"logit_bias":{"2147483648":1})", "logit_bias"},
        {R"(,"logit_bias":{"1":"a"})", "logit_bias"},
        {R"(,"logit_bias":{"1":true})", "logit_bias"},
        {R"(,"logit_bias":{"1":null})", "logit_bias"},
        {R"(,"logit_bias":{"1":100.5})", "logit_bias"},
        {R"(,"logit_bias":{"1":-101})", "logit_bias"},
        {R"(,"logit_bias":{"7":1,"07":2})", "logit_bias"},
        {too_many, "logit_bias"},
        {R"(,"min_tokens":-1)", "min_tokens"},
        {R"(,"min_tokens":1.5)", "min_tokens"},
        {R"(,"min_tokens":"3")", "min_tokens"},
        {R"(,"min_tokens":11,"max_tokens":10)", "min_tokens"},
    };
    for (ApiKind kind : {ApiKind::kChat, ApiKind::kCompletion}) {
        for (const auto& [extra, param] : cases) {
            auto e = request(kind, extra);
            ASSERT_TRUE(e) << kind_name(kind) << ": " << extra.substr(0, 80);
            EXPECT_EQ(e->param, param) << extra.substr(0, 80) << " → " << e->message;
            EXPECT_EQ(e->http_status, 400);
            EXPECT_NE(e->message.find(param), std::string::npos) << e->message;
        }
    }
    // Chat's max_completion_tokens bounds min_tokens too.
    auto e = chat(R"(,"min_tokens":8,"max_completion_tokens":7)");
    ASSERT_TRUE(e);
    EXPECT_EQ(e->param, "min_tokens");
}

// Every field of the table is refused, on the endpoints it names, for any value it does not
// accept, with its name as param; the values it accepts pass.
TEST(OpenAiParse, UnsupportedFieldsTable) {
    ASSERT_GT(unsupported_fields().size(), 40u);
    for (const UnsupportedField& f : unsupported_fields()) {
        for (ApiKind kind : {ApiKind::kChat, ApiKind::kCompletion}) {
            if (!(f.apis & (kind == ApiKind::kChat ? kChatApi : kCompletionApi))) continue;
            const std::string name(f.name);
            auto e = request(kind, ",\"" + name + "\":\"x\"");
            ASSERT_TRUE(e) << kind_name(kind) << ": " << name;
            EXPECT_EQ(e->param, name) << e->message;
            EXPECT_EQ(e->code, "unsupported_value") << name;
            EXPECT_EQ(e->http_status, 400);
            EXPECT_NE(e->message.find(f.why), std::string::npos) << e->message;
            EXPECT_FALSE(request(kind, ",\"" + name + "\":null")) << name;  // null is absent
            if (f.accepted.empty()) continue;
            for (const auto& v : nlohmann::json::parse(f.accepted)) {
                auto ok = request(kind, ",\"" + name + "\":" + v.dump());
                EXPECT_FALSE(ok) << kind_name(kind) << ": " << name << "=" << v.dump() << " → " << ok->message;
            }
        }
    }
}

TEST(OpenAiParse, RefusesUnimplementedFieldsWithRealisticValues) {
    struct Case {
        ApiKind kind;
        const char* extra;
        const char* param;
    };
    const Case cases[] = {
        {ApiKind::kChat, R"(,"store":true)", "store"},
        {ApiKind::kChat, R"(,"service_tier":"flex")", "service_tier"},
        {ApiKind::kChat, R"(,"modalities":["text","audio"])", "modalities"},
        {ApiKind::kChat, R"(,"audio":{"voice":"alloy","format":"wav"})", "audio"},
        {ApiKind::kChat, R"(,"prediction":{"type":"content","content":"x"})", "prediction"},
        {ApiKind::kChat, R"(,"web_search_options":{})", "web_search_options"},
        {ApiKind::kChat, R"(,"reasoning_effort":"low")", "reasoning_effort"},
        {ApiKind::kChat, R"(,"enable_thinking":false)", "enable_thinking"},
        {ApiKind::kChat, R"(,"thinking_budget":512)", "thinking_budget"},
        {ApiKind::kChat, R"(,"enable_search":true)", "enable_search"},
        {ApiKind::kChat, R"(,"verbosity":"low")", "verbosity"},
        {ApiKind::kChat, R"(,"functions":[{"name":"f"}])", "functions"},
        {ApiKind::kChat, R"(,"function_call":"auto")", "function_call"},
        {ApiKind::kChat, R"(,"guided_decoding_backend":"outlines")", "guided_decoding_backend"},
        {ApiKind::kChat, R"(,"guided_whitespace_pattern":" ")", "guided_whitespace_pattern"},
        {ApiKind::kChat, R"(,"tools":[{"type":"function","function":{"name":"f","strict":true}}],"tool_choice":"auto")", "tools[0].function.strict"},
        {ApiKind::kChat, R"(,"echo":true)", "echo"},
        {ApiKind::kChat, R"(,"include_reasoning":false)", "include_reasoning"},
        {ApiKind::kChat, R"(,"cache_salt":"s3cret")", "cache_salt"},
        {ApiKind::kChat, R"(,"prompt":"hi")", "prompt"},
        {ApiKind::kChat, R"(,"chat_template_kwargs":{"thinking_budget":100})", "chat_template_kwargs.thinking_budget"},
        {ApiKind::kChat, R"(,"stream":true,"best_of":2)", "best_of"},
        {ApiKind::kCompletion, R"(,"echo":true,"logprobs":0)", "echo"},
        {ApiKind::kCompletion, R"(,"add_generation_prompt":false)", "add_generation_prompt"},
        {ApiKind::kCompletion, R"(,"continue_final_message":true)", "continue_final_message"},
        {ApiKind::kCompletion, R"(,"parallel_tool_calls":false)", "parallel_tool_calls"},
        {ApiKind::kChat, R"(,"tools":[{"type":"function","function":{"name":"f","strict":true}}])", "tools[0].function.strict"},
        {ApiKind::kChat, R"(,"stream":true,"stream_options":{"include_obfuscation":true})", "stream_options.include_obfuscation"},
        {ApiKind::kChat, R"(,"moderation":{"model":"omni-moderation-latest"})", "moderation"},
        {ApiKind::kChat, R"(,"prompt_cache_retention":"24h")", "prompt_cache_retention"},
        {ApiKind::kChat, R"(,"prompt_cache_options":{"mode":"explicit"})", "prompt_cache_options"},
        {ApiKind::kCompletion, R"(,"suffix":"end")", "suffix"},
        {ApiKind::kCompletion, R"(,"prompt_logprobs":1)", "prompt_logprobs"},
        {ApiKind::kCompletion, R"(,"allowed_token_ids":[1,2])", "allowed_token_ids"},
        {ApiKind::kCompletion, R"(,"bad_words":["x"])", "bad_words"},
        {ApiKind::kCompletion, R"(,"use_beam_search":true)", "use_beam_search"},
        {ApiKind::kCompletion, R"(,"length_penalty":0.5)", "length_penalty"},
        {ApiKind::kCompletion, R"(,"logits_processors":["m.P"])", "logits_processors"},
        {ApiKind::kCompletion, R"(,"return_token_ids":true)", "return_token_ids"},
        {ApiKind::kCompletion, R"(,"max_completion_tokens":5)", "max_completion_tokens"},
        {ApiKind::kCompletion, R"(,"messages":[{"role":"user","content":"x"}])", "messages"},
    };
    for (const auto& c : cases) {
        auto e = request(c.kind, c.extra);
        ASSERT_TRUE(e) << kind_name(c.kind) << ": " << c.extra;
        EXPECT_EQ(e->param, c.param) << c.extra << " → " << e->message;
        EXPECT_EQ(e->code, "unsupported_value") << c.extra;
        EXPECT_EQ(e->http_status, 400);
    }
}

// A Jinja-interpreted chat template takes every chat_template_kwargs key; the native Qwen
// renderers take only the keys they read (the refusal above).
TEST(OpenAiParse, AnyTemplateKwargWithJinjaTemplate) {
    GenerationSpec s;
    const std::string body =
        R"({"model":"m","messages":[{"role":"user","content":"x"}],)"
        R"("chat_template_kwargs":{"date_string":"01 Jan 2030","builtin_tools":["a"],"enable_thinking":false}})";
    EXPECT_FALSE(parse_generation_request(ApiKind::kChat, body, kModels, s, /*any_template_kwargs=*/true));
    EXPECT_EQ(s.chat_render.template_kwargs["date_string"], "01 Jan 2030");
    EXPECT_EQ(s.chat_render.template_kwargs["builtin_tools"][0], "a");
    EXPECT_FALSE(s.chat_render.enable_thinking);
    GenerationSpec t;
    auto e = parse_generation_request(ApiKind::kChat, body, kModels, t);
    ASSERT_TRUE(e);
    EXPECT_EQ(e->param, "chat_template_kwargs.date_string");
}

// The request-surface fields this server implements (issue 16 item 2) reach the spec.
TEST(OpenAiParse, RequestSurfaceFieldsReachTheSpec) {
    GenerationSpec c;
    auto e = parse_generation_request(
        ApiKind::kChat,
        R"({"model":"m","messages":[{"role":"user","content":"a"},{"role":"assistant","content":"b"}],)"
        R"("continue_final_message":true,"chat_template_kwargs":{"enable_thinking":false,"preserve_thinking":true,)"
        R"("add_vision_id":true},"priority":-3,"truncate_prompt_tokens":7,"skip_special_tokens":false,)"
        R"("parallel_tool_calls":false,"n":2,"best_of":5,"stream":false})",
        kModels, c);
    ASSERT_FALSE(e) << e->message;
    EXPECT_TRUE(c.chat_render.continue_final_message);
    EXPECT_FALSE(c.chat_render.add_generation_prompt) << "continue_final_message turns the generation prompt off";
    EXPECT_FALSE(c.chat_render.enable_thinking);
    EXPECT_TRUE(c.chat_render.preserve_thinking);
    EXPECT_EQ(c.priority, -3);
    EXPECT_EQ(c.truncate_prompt_tokens, 7);
    EXPECT_FALSE(c.params.skip_special_tokens);
    EXPECT_FALSE(c.parallel_tool_calls);
    EXPECT_EQ(c.params.n, 5) << "best_of completions are generated";
    EXPECT_EQ(c.n_returned, 2);
    EXPECT_EQ(c.params.logprobs, 0) << "best_of ranks by the sampled tokens' logprobs";
    EXPECT_FALSE(c.logprobs) << "... which the client did not ask for";

    GenerationSpec p;
    e = parse_generation_request(ApiKind::kCompletion,
                                 R"({"model":"m","prompt":"a","echo":true,"stream":true,)"
                                 R"("stream_options":{"include_usage":true,"continuous_usage_stats":true},"best_of":1})",
                                 kModels, p);
    ASSERT_FALSE(e) << e->message;
    EXPECT_TRUE(p.echo);
    EXPECT_TRUE(p.continuous_usage);
    EXPECT_EQ(p.n_returned, 0);

    struct Bad {
        ApiKind kind;
        const char* body;
        const char* param;
    };
    const Bad bad[] = {
        {ApiKind::kChat, R"({"model":"m","messages":[{"role":"user","content":"a"}],"continue_final_message":true,"add_generation_prompt":true})", "continue_final_message"},
        {ApiKind::kChat, R"({"model":"m","messages":[{"role":"user","content":"a"}],"add_generation_prompt":1})", "add_generation_prompt"},
        {ApiKind::kCompletion, R"({"model":"m","prompt":"a","priority":1.5})", "priority"},
        {ApiKind::kCompletion, R"({"model":"m","prompt":"a","truncate_prompt_tokens":-2})", "truncate_prompt_tokens"},
        {ApiKind::kCompletion, R"({"model":"m","prompt":"a","n":3,"best_of":2})", "best_of"},
        {ApiKind::kCompletion, R"({"model":"m","prompt":"a","stream":true,"stream_options":{"continuous_usage_stats":true}})", "stream_options.continuous_usage_stats"},
        {ApiKind::kCompletion, R"({"model":"m","prompt":"a","skip_special_tokens":"no"})", "skip_special_tokens"},
    };
    for (const Bad& b : bad) {
        GenerationSpec s;
        auto err = parse_generation_request(b.kind, b.body, kModels, s);
        ASSERT_TRUE(err) << b.body;
        EXPECT_EQ(err->param, b.param) << b.body << " → " << err->message;
        EXPECT_EQ(err->http_status, 400);
    }
}

// response_format / structured_outputs structural tags (current and legacy shapes) become a
// structural-tag grammar; a malformed one is a 400 naming the field.
TEST(OpenAiParse, StructuralTags) {
    const std::string format =
        R"({"type":"tag","begin":"<a>","content":{"type":"json_schema","json_schema":{"type":"object"}},"end":"</a>"})";
    GenerationSpec s;
    auto e = parse_generation_request(
        ApiKind::kChat,
        R"({"model":"m","messages":[{"role":"user","content":"a"}],"response_format":{"type":"structural_tag","format":)" +
            format + "}}",
        kModels, s);
    ASSERT_FALSE(e) << e->message;
    ASSERT_TRUE(s.grammar);
    EXPECT_EQ(s.grammar->kind, grammar::GrammarSpec::Kind::kStructuralTag);
    EXPECT_EQ(s.grammar_param, "response_format");
    const auto tag = nlohmann::json::parse(s.grammar->text);
    EXPECT_EQ(tag["format"]["begin"], "<a>");

    GenerationSpec legacy;
    e = parse_generation_request(
        ApiKind::kCompletion,
        R"({"model":"m","prompt":"a","response_format":{"type":"structural_tag","triggers":["<f="],)"
        R"("structures":[{"begin":"<f=x>","schema":{"type":"object"},"end":"</f>"}]}})",
        kModels, legacy);
    ASSERT_FALSE(e) << e->message;
    ASSERT_TRUE(legacy.grammar);
    const auto lt = nlohmann::json::parse(legacy.grammar->text);
    EXPECT_EQ(lt["format"]["type"], "triggered_tags");
    EXPECT_EQ(lt["format"]["tags"][0]["content"]["json_schema"], nlohmann::json::parse(R"({"type":"object"})"));

    GenerationSpec text;
    e = parse_generation_request(ApiKind::kCompletion,
                                 R"({"model":"m","prompt":"a","structured_outputs":{"structural_tag":)" +
                                     nlohmann::json(R"({"type":"structural_tag","format":)" + format + "}").dump() + "}}",
                                 kModels, text);
    ASSERT_FALSE(e) << e->message;
    EXPECT_EQ(text.grammar_param, "structured_outputs");

    const std::pair<const char*, const char*> bad[] = {
        {R"("response_format":{"type":"structural_tag"})", "response_format"},
        {R"("response_format":{"type":"structural_tag","structures":[{"begin":"<x>","schema":{},"end":"</x>"}],"triggers":["<y"]})", "response_format"},
        {R"("response_format":{"type":"structural_tag","format":{"type":"json_schema","json_schema":{"type":"array","uniqueItems":true}}})", "response_format"},
        {R"("structured_outputs":{"structural_tag":"not json"})", "structured_outputs.structural_tag"},
    };
    for (const auto& [extra, param] : bad) {
        GenerationSpec b;
        auto err = parse_generation_request(ApiKind::kCompletion, std::string(R"({"model":"m","prompt":"a",)") + extra + "}",
                                            kModels, b);
        ASSERT_TRUE(err) << extra;
        EXPECT_EQ(err->param, param) << extra << " → " << err->message;
    }
}

TEST(OpenAiParse, AcceptsHarmlessAndUnknownFields) {
    for (ApiKind kind : {ApiKind::kChat, ApiKind::kCompletion}) {
        const char* extras[] = {
            R"(,"user":"u-1","safety_identifier":"h","metadata":{"k":"v"},"prompt_cache_key":"k")",
            R"(,"prompt_cache_retention":"in_memory","prompt_cache_options":{"mode":"implicit"})",
            R"(,"store":false,"service_tier":"auto","parallel_tool_calls":true,"modalities":["text"],"verbosity":"medium")",
            R"(,"add_special_tokens":true,"spaces_between_special_tokens":false,"skip_special_tokens":true)",
            R"(,"add_special_tokens":false,"use_beam_search":false,"length_penalty":1.0,"bad_words":[],"priority":0)",
            R"(,"stream":true,"stream_options":{"include_usage":true,"include_obfuscation":false,"continuous_usage_stats":false})",
            R"(,"frobnicate":{"x":1},"best_of":1)",  // neither API defines frobnicate: ignored, as vLLM does
        };
        for (const char* extra : extras) {
            auto e = request(kind, extra);
            EXPECT_FALSE(e) << kind_name(kind) << ": " << extra << " → " << e->message;
        }
    }
}

TEST(OpenAiParse, ContentPartsAreTextOrImages) {
    GenerationSpec s;
    auto e = parse_generation_request(
        ApiKind::kChat, R"({"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]}]})",
        kModels, s);
    EXPECT_FALSE(e) << e->message;
    // image_url parts: their URLs in message order (the object form and the string form).
    GenerationSpec si;
    e = parse_generation_request(
        ApiKind::kChat,
        R"({"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"a"},{"type":"image_url","image_url":{"url":"data:x"}}]},)"
        R"({"role":"user","content":[{"type":"image_url","image_url":"http://h/y.png"}]}]})",
        kModels, si);
    EXPECT_FALSE(e) << e->message;
    EXPECT_EQ(si.media, (std::vector<MediaUrl>{{false, "data:x"}, {false, "http://h/y.png"}}));
    e = parse_generation_request(
        ApiKind::kChat, R"({"model":"m","messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":3}}]}]})",
        kModels, s);
    ASSERT_TRUE(e);
    EXPECT_EQ(e->param, "messages[0].content[0].image_url");
    // video_url parts: their URLs in order with the images', the part handed to the template as
    // {"type": "video"}.
    GenerationSpec sv;
    e = parse_generation_request(
        ApiKind::kChat,
        R"({"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"a"},{"type":"video_url","video_url":{"url":"data:x"}},)"
        R"({"type":"image_url","image_url":{"url":"data:y"}}]}]})",
        kModels, sv);
    EXPECT_FALSE(e) << e->message;
    EXPECT_EQ(sv.media, (std::vector<MediaUrl>{{true, "data:x"}, {false, "data:y"}}));
    EXPECT_EQ(sv.messages[0]["content"][1].dump(), R"({"type":"video"})");
    e = parse_generation_request(
        ApiKind::kChat, R"({"model":"m","messages":[{"role":"user","content":[{"type":"video_url","video_url":{}}]}]})",
        kModels, s);
    ASSERT_TRUE(e);
    EXPECT_EQ(e->param, "messages[0].content[0].video_url");
    e = parse_generation_request(
        ApiKind::kChat,
        R"({"model":"m","messages":[{"role":"user","content":[{"type":"input_audio","input_audio":{"data":"x"}}]}]})",
        kModels, s);
    ASSERT_TRUE(e);
    EXPECT_EQ(e->param, "messages[0].content[0].type");
    EXPECT_EQ(e->code, "unsupported_value");
    e = parse_generation_request(ApiKind::kChat, R"({"model":"m","messages":[{"role":"user","content":[{"text":"a"}]}]})",
                                 kModels, s);
    ASSERT_TRUE(e);
    EXPECT_EQ(e->param, "messages[0].content[0].type");
    EXPECT_EQ(e->code, "");
    e = parse_generation_request(ApiKind::kChat, R"({"model":"m","messages":[{"role":"user","content":[{"type":"text"}]}]})",
                                 kModels, s);
    ASSERT_TRUE(e);
    EXPECT_EQ(e->param, "messages[0].content[0].text");
}

// docs/API.md is the user's list: it must name every refused field.
TEST(OpenAiParse, ApiDocNamesEveryRefusedField) {
    const std::string doc = qs::test::read_fixture(std::string(QS_SOURCE_DIR) + "/docs/API.md");
    for (const UnsupportedField& f : unsupported_fields())
        EXPECT_NE(doc.find("`" + std::string(f.name) + "`"), std::string::npos) << f.name << " is not in docs/API.md";
    for (const char* name : {"logit_bias", "min_tokens", "user", "metadata", "add_special_tokens",
                             "spaces_between_special_tokens", "chat_template_kwargs", "stream_options"})
        EXPECT_NE(doc.find("`" + std::string(name) + "`"), std::string::npos) << name;
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

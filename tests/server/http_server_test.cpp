// The server over real loopback sockets: routes, OpenAI shapes, SSE framing, keep-alive, every
// error status, disconnects and slow readers (checked through the fake engine's accounting).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "core/build_info.h"
#include "test_server.h"

namespace qs::testing {
namespace {

using J = nlohmann::json;

std::string chat_body(const std::string& content, const std::string& extra = "") {
    return R"({"model":"test-model","messages":[{"role":"user","content":)" + J(content).dump() + "}]" + extra + "}";
}

TEST(HttpServer, HealthModelsMetrics) {
    TestServer s;
    auto r = http_call(s.port(), "GET", "/health");
    EXPECT_EQ(r.status, 200);
    r = http_call(s.port(), "GET", "/v1/models");
    ASSERT_EQ(r.status, 200);
    auto j = J::parse(r.body);
    EXPECT_EQ(j["data"][0]["id"], "test-model");
    r = http_call(s.port(), "GET", "/metrics");
    EXPECT_EQ(r.status, 200);
    EXPECT_NE(r.body.find("qwenserve_num_requests_running"), std::string::npos);
    EXPECT_NE(r.headers["content-type"].find("text/plain"), std::string::npos);
}

TEST(HttpServer, PingVersionAndUnservedRoutes) {
    TestServer s;
    // vLLM's /ping answers as /health does, to GET and POST; /version names the build.
    for (const char* method : {"GET", "POST"}) {
        auto r = http_call(s.port(), method, "/ping");
        EXPECT_EQ(r.status, 200) << method;
        EXPECT_EQ(J::parse(r.body)["status"], "ok") << method;
    }
    EXPECT_EQ(http_call(s.port(), "DELETE", "/ping").status, 405);
    auto r = http_call(s.port(), "GET", "/version");
    ASSERT_EQ(r.status, 200);
    const J v = J::parse(r.body);
    EXPECT_EQ(v["version"], build_info().version);
    EXPECT_EQ(v["git_hash"], build_info().git_hash);
    EXPECT_EQ(http_call(s.port(), "POST", "/version").status, 405);
    // An endpoint this server does not serve (vLLM's Responses API, embeddings): a 404 that lists
    // what it serves.
    for (const char* path : {"/v1/responses", "/v1/embeddings"}) {
        r = http_call(s.port(), "POST", path, "{}");
        EXPECT_EQ(r.status, 404) << path;
        const std::string msg = J::parse(r.body)["error"]["message"];
        EXPECT_NE(msg.find(path), std::string::npos) << msg;
        EXPECT_NE(msg.find("/v1/chat/completions"), std::string::npos) << msg;
    }
    // While the model loads /ping is 503 like /health.
    s.state->set_engine(nullptr);
    EXPECT_EQ(http_call(s.port(), "GET", "/ping").status, 503);
    s.state->set_engine(s.engine.get());
}

TEST(HttpServer, HealthIs503WhileLoadingOrWedged) {
    TestServerConfig cfg;
    cfg.engine.health_stall_s = 0.05;
    TestServer s(cfg);
    s.state->set_engine(nullptr);
    EXPECT_EQ(http_call(s.port(), "GET", "/health").status, 503);
    EXPECT_EQ(http_call(s.port(), "POST", "/v1/chat/completions", chat_body("x")).status, 503);
    s.state->set_engine(s.engine.get());
    EXPECT_EQ(http_call(s.port(), "GET", "/health").status, 200);
    s.engine->set_wedged(true);
    std::this_thread::sleep_for(std::chrono::milliseconds(150));
    EXPECT_EQ(http_call(s.port(), "GET", "/health").status, 503);
    s.engine->set_wedged(false);
    std::this_thread::sleep_for(std::chrono::milliseconds(150));
    EXPECT_EQ(http_call(s.port(), "GET", "/health").status, 200);
}

TEST(HttpServer, ChatSplitsReasoningAndCountsUsage) {
    TestServer s;
    auto r = http_call(s.port(), "POST", "/v1/chat/completions", chat_body("q [[reply:hmm</think>\n\nSure.]]"));
    ASSERT_EQ(r.status, 200) << r.body;
    auto j = J::parse(r.body);
    EXPECT_EQ(j["object"], "chat.completion");
    EXPECT_EQ(j["choices"][0]["message"]["reasoning_content"], "hmm");
    EXPECT_EQ(j["choices"][0]["message"]["content"], "Sure.");
    EXPECT_EQ(j["choices"][0]["finish_reason"], "stop");
    const int completion = j["usage"]["completion_tokens"];
    EXPECT_EQ(completion, int(std::string("hmm</think>\n\nSure.").size()) + 1);  // + EOS
    EXPECT_EQ(j["usage"]["total_tokens"], j["usage"]["prompt_tokens"].get<int>() + completion);
    EXPECT_TRUE(s.wait_idle());
}

TEST(HttpServer, StreamingChatFraming) {
    TestServer s;
    TestConnection c(s.port());
    c.send_request("POST", "/v1/chat/completions",
                   chat_body("q [[reply:a</think>bc]]", R"(,"stream":true,"n":2,"stream_options":{"include_usage":true})"));
    ClientResponse r;
    ASSERT_TRUE(c.read_response(r));
    EXPECT_EQ(r.status, 200);
    EXPECT_EQ(r.headers["content-type"], "text/event-stream");
    auto events = sse_payloads(r.body);
    ASSERT_GE(events.size(), 4u);
    EXPECT_EQ(events.back(), "[DONE]");
    std::string content[2], reasoning[2];
    int finishes = 0;
    for (size_t i = 0; i + 1 < events.size(); ++i) {
        auto j = J::parse(events[i]);
        EXPECT_EQ(j["object"], "chat.completion.chunk");
        EXPECT_TRUE(j.contains("usage"));
        if (i + 2 == events.size()) {  // the usage chunk
            EXPECT_TRUE(j["choices"].empty());
            EXPECT_EQ(j["usage"]["completion_tokens"], 2 * 12);
            continue;
        }
        EXPECT_TRUE(j["usage"].is_null());
        const auto& ch = j["choices"][0];
        const int idx = ch["index"];
        if (ch["delta"].contains("content")) content[idx] += ch["delta"]["content"].get<std::string>();
        if (ch["delta"].contains("reasoning_content")) reasoning[idx] += ch["delta"]["reasoning_content"].get<std::string>();
        if (!ch["finish_reason"].is_null()) {
            EXPECT_EQ(ch["finish_reason"], "stop");
            ++finishes;
        }
    }
    EXPECT_EQ(finishes, 2);
    for (int i = 0; i < 2; ++i) {
        EXPECT_EQ(content[i], "bc");
        EXPECT_EQ(reasoning[i], "a");
    }
    // Keep-alive: the same connection serves another request.
    c.send_request("GET", "/health");
    ASSERT_TRUE(c.read_response(r));
    EXPECT_EQ(r.status, 200);
    EXPECT_TRUE(s.wait_idle());
}

TEST(HttpServer, CompletionsStopStringAndLength) {
    TestServer s;
    auto r = http_call(s.port(), "POST", "/v1/completions",
                       R"({"model":"test-model","prompt":"[[reply:one two three]]","stop":[" three"]})");
    ASSERT_EQ(r.status, 200) << r.body;
    auto j = J::parse(r.body);
    EXPECT_EQ(j["choices"][0]["text"], "one two");
    EXPECT_EQ(j["choices"][0]["finish_reason"], "stop");
    r = http_call(s.port(), "POST", "/v1/completions", R"({"model":"test-model","prompt":"[[repeat]]","max_tokens":5,"logprobs":1})");
    j = J::parse(r.body);
    EXPECT_EQ(j["choices"][0]["text"], "ab ab");
    EXPECT_EQ(j["choices"][0]["finish_reason"], "length");
    EXPECT_EQ(j["choices"][0]["logprobs"]["tokens"].size(), 5u);
    EXPECT_EQ(j["usage"]["completion_tokens"], 5);
}

TEST(HttpServer, ToolCallsAndJsonObject) {
    TestServer s;
    const std::string tools = R"(,"tools":[{"type":"function","function":{"name":"get","parameters":{"type":"object"}}}])";
    auto r = http_call(s.port(), "POST", "/v1/chat/completions",
                       chat_body(R"(q [[reply:x</think><tool_call>{"name":"get","arguments":{"k":1}}</tool_call>]])", tools));
    ASSERT_EQ(r.status, 200) << r.body;
    auto j = J::parse(r.body);
    EXPECT_EQ(j["choices"][0]["finish_reason"], "tool_calls");
    EXPECT_TRUE(j["choices"][0]["message"]["content"].is_null());
    EXPECT_EQ(j["choices"][0]["message"]["tool_calls"][0]["function"]["name"], "get");
    EXPECT_EQ(j["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"], R"({"k":1})");
    // The fake engine constrains nothing: structured outputs are refused there (the real
    // engine's are tested in tests/engine/grammar_engine_test and tests/e2e).
    const std::string json_fmt = R"(,"response_format":{"type":"json_object"},"chat_template_kwargs":{"enable_thinking":false})";
    r = http_call(s.port(), "POST", "/v1/chat/completions", chat_body(R"([[reply:{"a": 1}]])", json_fmt));
    EXPECT_EQ(r.status, 400) << r.body;
    EXPECT_EQ(J::parse(r.body)["error"]["param"], "response_format") << r.body;
    EXPECT_EQ(J::parse(r.body)["error"]["code"], "unsupported_value") << r.body;
}

TEST(HttpServer, ErrorStatuses) {
    TestServerConfig cfg;
    cfg.server.api_key = "sekret";
    cfg.server.max_body_bytes = 4096;
    cfg.engine.max_model_len = 200;
    TestServer s(cfg);
    const std::string auth = "Authorization: Bearer sekret\r\n";
    auto expect_error = [](const ClientResponse& r, int status, const std::string& param) {
        EXPECT_EQ(r.status, status) << r.body;
        auto j = J::parse(r.body, nullptr, false);
        ASSERT_FALSE(j.is_discarded()) << r.body;
        ASSERT_TRUE(j.contains("error")) << r.body;
        for (const char* k : {"message", "type", "param", "code"}) EXPECT_TRUE(j["error"].contains(k)) << k;
        if (!param.empty()) {
            EXPECT_EQ(j["error"]["param"], param) << r.body;
        }
    };
    expect_error(http_call(s.port(), "POST", "/v1/chat/completions", chat_body("x")), 401, "");
    expect_error(http_call(s.port(), "POST", "/v1/chat/completions", chat_body("x"), "Authorization: Bearer nope\r\n"), 401, "");
    expect_error(http_call(s.port(), "GET", "/health"), 401, "");  // every route (security_test.cpp)
    expect_error(http_call(s.port(), "POST", "/v1/chat/completions", "{nope", auth), 400, "");
    expect_error(http_call(s.port(), "POST", "/v1/chat/completions", chat_body("x", R"(,"max_tokens":-1)"), auth), 400, "max_tokens");
    expect_error(http_call(s.port(), "POST", "/v1/chat/completions", chat_body(std::string(300, 'x')), auth), 400, "messages");
    expect_error(http_call(s.port(), "POST", "/v1/chat/completions", chat_body("x", R"(,"max_tokens":190)"), auth), 400, "max_tokens");
    expect_error(http_call(s.port(), "POST", "/v1/chat/completions", chat_body(std::string(5000, 'x')), auth), 413, "");
    expect_error(http_call(s.port(), "GET", "/v1/nothing", "", auth), 404, "");
    expect_error(http_call(s.port(), "GET", "/v1/chat/completions", "", auth), 405, "");
    expect_error(http_call(s.port(), "POST", "/v1/completions", R"({"model":"x","prompt":"a"})", auth), 404, "model");
    auto r = http_call(s.port(), "POST", "/tokenize", R"({"prompt":"ab"})", auth);
    EXPECT_EQ(r.status, 200);
    EXPECT_EQ(J::parse(r.body)["tokens"], J::array({97, 98}));
    r = http_call(s.port(), "POST", "/detokenize", R"({"tokens":[104,105]})", auth);
    EXPECT_EQ(J::parse(r.body)["prompt"], "hi");
    expect_error(http_call(s.port(), "POST", "/detokenize", R"({"tokens":[-4]})", auth), 400, "tokens");
    // /tokenize's chat flags must be booleans: a 400 naming the field, not the 500 of a json type error.
    expect_error(http_call(s.port(), "POST", "/tokenize",
                           R"({"messages":[{"role":"user","content":"a"}],"add_generation_prompt":"yes"})", auth),
                 400, "add_generation_prompt");
    expect_error(http_call(s.port(), "POST", "/tokenize",
                           R"({"messages":[{"role":"user","content":"a"}],"chat_template_kwargs":{"enable_thinking":1}})",
                           auth),
                 400, "enable_thinking");
    // The rest of the chat-completions rules hold for /tokenize too (one parser).
    expect_error(http_call(s.port(), "POST", "/tokenize",
                           R"({"messages":[{"role":"user","content":"a"}],"chat_template_kwargs":[true]})", auth),
                 400, "chat_template_kwargs");
    expect_error(http_call(s.port(), "POST", "/tokenize",
                           R"({"messages":[{"role":"user","content":"a"}],"chat_template_kwargs":{"colour":"red"}})", auth),
                 400, "chat_template_kwargs.colour");
    expect_error(http_call(s.port(), "POST", "/tokenize",
                           R"({"messages":[{"role":"user","content":"a"}],"add_generation_prompt":true,)"
                           R"("continue_final_message":true})",
                           auth),
                 400, "continue_final_message");
    // continue_final_message alone drops the generation prompt (vLLM's default of true yields).
    const auto count_of = [&](const std::string& body) {
        const auto reply = http_call(s.port(), "POST", "/tokenize", body, auth);
        EXPECT_EQ(reply.status, 200) << reply.body;
        return J::parse(reply.body).value("count", -1);
    };
    const std::string msgs = R"({"messages":[{"role":"assistant","content":"ab"}])";
    EXPECT_LT(count_of(msgs + R"(,"continue_final_message":true})"), count_of(msgs + "}"));
    EXPECT_TRUE(s.wait_idle());
}

// An engine that runs one request and queues one more (the next is refused: 429).
TestServerConfig one_running_one_waiting() {
    TestServerConfig cfg;
    cfg.engine.max_running = 1;
    cfg.engine.max_waiting = 1;
    cfg.engine.step_interval = std::chrono::milliseconds(5);
    return cfg;
}

TEST(HttpServer, FullQueueGets429WithRetryAfter) {
    TestServer s(one_running_one_waiting());
    // Fill: one running, one waiting (both long), then the next is refused. Each step waits for
    // the engine's own counters, never for bytes or a fixed sleep: the stream's headers can arrive
    // before the engine has moved the first request from waiting to running, and a second request
    // sent then is (rightly) refused, which a loaded 2-core CI machine did.
    auto wait_for = [&](auto done) {
        const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
        while (!done() && std::chrono::steady_clock::now() < deadline)
            std::this_thread::sleep_for(std::chrono::milliseconds(5));
        return done();
    };
    const std::string long_stream = R"({"model":"test-model","prompt":"[[repeat]]","max_tokens":3000,"stream":true})";
    std::vector<std::unique_ptr<TestConnection>> holders;
    holders.push_back(std::make_unique<TestConnection>(s.port()));
    holders.back()->send_request("POST", "/v1/completions", long_stream);
    ASSERT_TRUE(wait_for([&] {
        const EngineStats st = s.engine->stats();
        return st.num_running == 1 && st.num_waiting == 0;
    }));
    holders.push_back(std::make_unique<TestConnection>(s.port()));
    holders.back()->send_request("POST", "/v1/completions", long_stream);
    ASSERT_TRUE(wait_for([&] { return s.engine->num_live() == 2 && s.engine->stats().num_waiting == 1; }))
        << "live " << s.engine->num_live() << ", waiting " << s.engine->stats().num_waiting;
    auto r = http_call(s.port(), "POST", "/v1/completions", R"({"model":"test-model","prompt":"x"})");
    EXPECT_EQ(r.status, 429) << r.body;
    EXPECT_EQ(r.headers["retry-after"], "1");
    holders.clear();  // disconnects abort both
    EXPECT_TRUE(s.wait_idle());
}

TEST(HttpServer, BatchedPromptsRefusedPartWayAnswerOnceAndFreeEverything) {
    // A completions batch whose later prompts the engine refuses (queue full) after earlier ones
    // were accepted: one 429 for the request, the accepted prompts aborted, nothing left behind.
    TestServer s(one_running_one_waiting());
    const std::string batch =
        R"({"model":"test-model","prompt":["[[repeat]]","[[repeat]]","[[repeat]]"],"max_tokens":3000})";
    auto r = http_call(s.port(), "POST", "/v1/completions", batch);
    EXPECT_EQ(r.status, 429) << r.body;
    EXPECT_EQ(r.headers["retry-after"], "1");
    EXPECT_TRUE(s.wait_idle());
    EXPECT_GE(s.engine->num_aborted(), 1);
    // Only what reached the engine is counted: the aborted prompts, not the refused rest.
    const ServerMetrics& m = s.state->metrics();
    EXPECT_EQ(m.finished_abort.load(), uint64_t(s.engine->num_aborted()));
    EXPECT_EQ(m.prompt_tokens.load(), uint64_t(s.engine->num_aborted()) * std::string("[[repeat]]").size());
    // The same server answers a batch that fits afterwards.
    r = http_call(s.port(), "POST", "/v1/completions",
                  R"({"model":"test-model","prompt":["[[reply:a]]"],"max_tokens":5})");
    ASSERT_EQ(r.status, 200) << r.body;
    EXPECT_EQ(J::parse(r.body)["choices"][0]["text"], "a");
    EXPECT_TRUE(s.wait_idle());
}

TEST(HttpServer, DisconnectMidStreamAbortsWithinAStep) {
    TestServerConfig cfg;
    cfg.engine.step_interval = std::chrono::milliseconds(20);
    TestServer s(cfg);
    TestConnection c(s.port());
    c.send_request("POST", "/v1/chat/completions", chat_body("[[repeat]]", R"(,"stream":true,"max_tokens":3000)"));
    ASSERT_TRUE(c.read_until([](const std::string& b) { return sse_payloads(b).size() >= 3; }));
    EXPECT_EQ(s.engine->num_live(), 1);
    EXPECT_GT(s.engine->num_pages_used(), 0);
    const int64_t steps_before = s.engine->stats().steps_total;
    c.close();
    ASSERT_TRUE(s.wait_idle());
    const int64_t steps_after = s.engine->stats().steps_total;
    EXPECT_LE(steps_after - steps_before, 2) << "aborted request freed only after " << steps_after - steps_before << " steps";
    EXPECT_EQ(s.engine->num_aborted(), 1);
    EXPECT_EQ(s.state->metrics().client_disconnects.load(), 1u);
}

TEST(HttpServer, DisconnectWhileWaitingForNonStreamingReply) {
    TestServer s;
    TestConnection c(s.port());
    c.send_request("POST", "/v1/completions", R"({"model":"test-model","prompt":"[[repeat]]","max_tokens":3000})");
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (s.engine->stats().num_running < 1 && std::chrono::steady_clock::now() < deadline)
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
    ASSERT_EQ(s.engine->num_live(), 1);
    c.close();
    EXPECT_TRUE(s.wait_idle());
    EXPECT_EQ(s.engine->num_aborted(), 1);
}

TEST(HttpServer, SlowReaderGetsBoundedBufferThenAbort) {
    TestServerConfig cfg;
    cfg.server.stream_buffer_bytes = 64 * 1024;
    cfg.engine.step_interval = std::chrono::microseconds(50);
    cfg.engine.max_model_len = 1 << 24;
    TestServer s(cfg);
    TestConnection c(s.port());
    c.set_rcvbuf(4096);
    c.send_request("POST", "/v1/completions",
                   R"({"model":"test-model","prompt":"[[repeat]]","max_tokens":30000,"stream":true,"logprobs":5})");
    // Never read: the kernel buffers fill, then the server's bound trips and the request is aborted.
    for (int i = 0; i < 1000 && s.engine->num_live() == 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    EXPECT_EQ(s.engine->num_live(), 1);
    EXPECT_TRUE(s.wait_idle(20.0));
    EXPECT_EQ(s.engine->num_aborted(), 1);
}

TEST(HttpServer, EngineErrorMidStream) {
    TestServer s;
    auto r = http_call(s.port(), "POST", "/v1/completions", R"({"model":"test-model","prompt":"[[fail]]","stream":true})");
    EXPECT_EQ(r.status, 200);
    auto events = sse_payloads(r.body);
    ASSERT_GE(events.size(), 2u);
    EXPECT_EQ(events.back(), "[DONE]");
    EXPECT_TRUE(J::parse(events[events.size() - 2]).contains("error"));
    r = http_call(s.port(), "POST", "/v1/completions", R"({"model":"test-model","prompt":"[[fail]]"})");
    EXPECT_EQ(r.status, 500);
    EXPECT_TRUE(s.wait_idle());
}

TEST(HttpServer, ManyRequestsOnOneKeepAliveConnection) {
    TestServer s;
    TestConnection c(s.port());
    for (int i = 0; i < 20; ++i) {
        c.send_request("POST", "/v1/completions", R"({"model":"test-model","prompt":"[[reply:ok]]"})");
        ClientResponse r;
        ASSERT_TRUE(c.read_response(r));
        ASSERT_EQ(r.status, 200);
        EXPECT_EQ(J::parse(r.body)["choices"][0]["text"], "ok");
    }
}

}  // namespace
}  // namespace qs::testing

// --request-timeout-s and the engine watchdog through the HTTP server, over real loopback
// sockets with the fake engine: a request past its deadline is answered at once (504
// request_timeout, or an error event and [DONE] on a stream) and aborted in the engine, which
// frees its pages; a request that finishes first is untouched; a stalled engine loop turns
// /health to 503 and shows on /metrics.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "test_server.h"

namespace qs::testing {
namespace {

using J = nlohmann::json;

TestServerConfig with_timeout(double seconds) {
    TestServerConfig cfg;
    cfg.server.request_timeout_s = seconds;
    cfg.engine.step_interval = std::chrono::milliseconds(5);
    return cfg;
}

double metric(const std::string& text, const std::string& name) {
    const size_t p = text.find("\n" + name + " ");
    return p == std::string::npos ? -1.0 : std::stod(text.substr(p + name.size() + 2));
}

TEST(RequestTimeout, NonStreamingGets504AndFreesThePages) {
    TestServer s(with_timeout(0.3));
    const auto t0 = std::chrono::steady_clock::now();
    auto r = http_call(s.port(), "POST", "/v1/completions",
                       R"({"model":"test-model","prompt":"[[repeat]]","max_tokens":3000})");
    const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    EXPECT_EQ(r.status, 504) << r.body;
    const J j = J::parse(r.body);
    EXPECT_EQ(j["error"]["code"], "request_timeout");
    EXPECT_EQ(j["error"]["type"], "timeout_error");
    EXPECT_NE(j["error"]["message"].get<std::string>().find("--request-timeout-s"), std::string::npos);
    EXPECT_GE(took, 0.3);
    EXPECT_LT(took, 3.0);
    ASSERT_TRUE(s.wait_idle());
    EXPECT_EQ(s.engine->num_pages_used(), 0);
    EXPECT_EQ(s.engine->num_aborted(), 1);
    EXPECT_EQ(s.state->metrics().request_timeouts.load(), 1u);
    EXPECT_EQ(metric(http_call(s.port(), "GET", "/metrics").body, "qwenserve_request_timeouts_total"), 1.0);
}

TEST(RequestTimeout, StreamEndsWithAnErrorEventThenDone) {
    TestServer s(with_timeout(0.3));
    TestConnection c(s.port());
    c.send_request("POST", "/v1/chat/completions",
                   R"({"model":"test-model","messages":[{"role":"user","content":"[[repeat]]"}],"stream":true,"max_tokens":3000})");
    ClientResponse r;
    ASSERT_TRUE(c.read_response(r));
    EXPECT_EQ(r.status, 200);
    const auto events = sse_payloads(r.body);
    ASSERT_GE(events.size(), 3u);
    EXPECT_EQ(events.back(), "[DONE]");
    const J err = J::parse(events[events.size() - 2]);
    EXPECT_EQ(err["error"]["code"], "request_timeout");
    EXPECT_GT(events.size(), 3u) << "tokens streamed before the deadline";
    ASSERT_TRUE(s.wait_idle());
    EXPECT_EQ(s.engine->num_pages_used(), 0);
    EXPECT_EQ(s.engine->num_aborted(), 1);
}

TEST(RequestTimeout, ARequestThatFinishesInTimeIsUntouched) {
    TestServer s(with_timeout(5.0));
    auto r = http_call(s.port(), "POST", "/v1/completions",
                       R"({"model":"test-model","prompt":"[[reply:done]]","max_tokens":50})");
    ASSERT_EQ(r.status, 200) << r.body;
    EXPECT_EQ(J::parse(r.body)["choices"][0]["text"], "done");
    ASSERT_TRUE(s.wait_idle());
    EXPECT_EQ(s.engine->num_aborted(), 0);
    EXPECT_EQ(s.state->metrics().request_timeouts.load(), 0u);
}

// With one running slot the second request waits in the queue; both are answered at their
// deadlines (the stream with its error event, the other with 504) and both leave the engine.
TEST(RequestTimeout, RunningAndWaitingRequestsBothTimeOut) {
    TestServerConfig cfg = with_timeout(0.4);
    cfg.engine.max_running = 1;
    TestServer s(cfg);
    TestConnection running(s.port());
    running.send_request("POST", "/v1/completions",
                         R"({"model":"test-model","prompt":"[[repeat]]","max_tokens":3000,"stream":true})");
    TestConnection waiting(s.port());
    waiting.send_request("POST", "/v1/completions",
                         R"({"model":"test-model","prompt":"[[repeat]]","max_tokens":3000})");
    ClientResponse r;
    ASSERT_TRUE(waiting.read_response(r));
    EXPECT_EQ(r.status, 504) << r.body;
    ASSERT_TRUE(running.read_response(r));
    const auto events = sse_payloads(r.body);
    ASSERT_GE(events.size(), 2u);
    EXPECT_EQ(J::parse(events[events.size() - 2])["error"]["code"], "request_timeout");
    ASSERT_TRUE(s.wait_idle());
    EXPECT_EQ(s.engine->num_aborted(), 2);
    EXPECT_EQ(s.engine->num_pages_used(), 0);
    EXPECT_EQ(s.state->metrics().request_timeouts.load(), 2u);
}

// The watchdog on the fake engine: a loop that stops stepping with work in hand turns /health
// to 503 and qwenserve_engine_stalled to 1; the request keeps waiting and finishes once the loop
// moves again, and the stall is counted.
TEST(Watchdog, StalledLoopIs503AndCountedWhileTheRequestWaits) {
    TestServerConfig cfg;
    cfg.engine.health_stall_s = 0.5;
    cfg.engine.step_interval = std::chrono::milliseconds(2);
    TestServer s(cfg);
    TestConnection c(s.port());
    c.send_request("POST", "/v1/completions",
                   R"({"model":"test-model","prompt":"[[repeat]]","max_tokens":200,"stream":true})");
    ASSERT_TRUE(c.read_until([](const std::string& b) { return sse_payloads(b).size() >= 2; }));
    const double stalls_before = metric(http_call(s.port(), "GET", "/metrics").body, "qwenserve_engine_stalls_total");
    s.engine->set_wedged(true);
    std::this_thread::sleep_for(std::chrono::milliseconds(1000));
    auto h = http_call(s.port(), "GET", "/health");
    EXPECT_EQ(h.status, 503);
    EXPECT_EQ(J::parse(h.body)["status"], "stalled");
    std::string m = http_call(s.port(), "GET", "/metrics").body;
    EXPECT_EQ(metric(m, "qwenserve_engine_stalled"), 1.0);
    EXPECT_GE(metric(m, "qwenserve_engine_last_step_age_seconds"), 0.5);
    EXPECT_EQ(s.engine->num_live(), 1) << "the request keeps waiting";
    s.engine->set_wedged(false);
    ClientResponse r;
    ASSERT_TRUE(c.read_response(r));
    EXPECT_EQ(sse_payloads(r.body).back(), "[DONE]");
    EXPECT_EQ(http_call(s.port(), "GET", "/health").status, 200);
    m = http_call(s.port(), "GET", "/metrics").body;
    EXPECT_EQ(metric(m, "qwenserve_engine_stalled"), 0.0);
    EXPECT_EQ(metric(m, "qwenserve_engine_stalls_total"), stalls_before + 1);
    EXPECT_TRUE(s.wait_idle());
}

}  // namespace
}  // namespace qs::testing

// Security of the HTTP surface over real sockets: the API key on every route (and the option that
// leaves /health and /metrics open), checked before the body is read; the key comparison itself;
// the body limit of every route, announced (Content-Length) or discovered (chunked), answered
// with 413 and an OpenAI error body; prompts absent from the log unless --log-prompts.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "../common/test_files.h"
#include "core/log.h"
#include "server/request_guard.h"
#include "test_server.h"

namespace qs::testing {
namespace {

using J = nlohmann::json;

const std::string kAuth = "Authorization: Bearer sekret\r\n";

struct Route {
    const char* method;
    const char* path;
    const char* body;
};
const Route kRoutes[] = {
    {"GET", "/health", ""},
    {"GET", "/ping", ""},
    {"POST", "/ping", ""},
    {"GET", "/version", ""},
    {"GET", "/metrics", ""},
    {"GET", "/v1/models", ""},
    {"POST", "/v1/chat/completions", R"({"model":"test-model","messages":[{"role":"user","content":"hi"}]})"},
    {"POST", "/v1/completions", R"({"model":"test-model","prompt":"hi"})"},
    {"POST", "/tokenize", R"({"prompt":"hi"})"},
    {"POST", "/detokenize", R"({"tokens":[104,105]})"},
    {"GET", "/no/such/route", ""},
};

void expect_openai_error(const ClientResponse& r, int status, const std::string& code, const std::string& what) {
    EXPECT_EQ(r.status, status) << what << ": " << r.body;
    const J j = J::parse(r.body, nullptr, false);
    ASSERT_FALSE(j.is_discarded()) << what << ": " << r.body;
    ASSERT_TRUE(j.contains("error")) << what;
    for (const char* k : {"message", "type", "param", "code"}) EXPECT_TRUE(j["error"].contains(k)) << what << " " << k;
    EXPECT_EQ(j["error"]["code"], code) << what;
    EXPECT_EQ(j["error"]["type"], "invalid_request_error") << what;
}

TestServerConfig keyed(bool open_health_metrics) {
    TestServerConfig cfg;
    cfg.server.api_key = "sekret";
    cfg.server.open_health_metrics = open_health_metrics;
    return cfg;
}

TEST(Security, TheApiKeyIsRequiredOnEveryRoute) {
    TestServer s(keyed(false));
    for (const Route& r : kRoutes) {
        const std::string what = std::string(r.method) + " " + r.path;
        expect_openai_error(http_call(s.port(), r.method, r.path, r.body), 401, "invalid_api_key", what + " no key");
        for (const char* bad : {"Authorization: Bearer sekreT\r\n", "Authorization: Bearer sekret2\r\n",
                                "Authorization: Bearer sek\r\n", "Authorization: Bearer \r\n",
                                "Authorization: Basic sekret\r\n", "Authorization: sekret\r\n"})
            expect_openai_error(http_call(s.port(), r.method, r.path, r.body, bad), 401, "invalid_api_key",
                                what + " " + bad);
        const ClientResponse ok = http_call(s.port(), r.method, r.path, r.body, kAuth);
        EXPECT_NE(ok.status, 401) << what;
        EXPECT_EQ(ok.status, std::string(r.path) == "/no/such/route" ? 404 : 200) << what << ": " << ok.body;
    }
    EXPECT_TRUE(s.wait_idle());
}

TEST(Security, HealthAndMetricsCanBeLeftOpen) {
    TestServer s(keyed(true));
    for (const Route& r : kRoutes) {
        const bool open =
            std::string(r.path) == "/health" || std::string(r.path) == "/ping" || std::string(r.path) == "/metrics";
        const ClientResponse c = http_call(s.port(), r.method, r.path, r.body);
        if (open)
            EXPECT_EQ(c.status, 200) << r.path;
        else
            expect_openai_error(c, 401, "invalid_api_key", r.path);
    }
}

// The key is checked once the headers are in: a refused request's body is never waited for.
TEST(Security, AWrongKeyIsRefusedBeforeTheBodyIsRead) {
    TestServer s(keyed(false));
    TestConnection c(s.port());
    ASSERT_TRUE(c.ok());
    // Announces a body it never sends: only a header-time check can answer.
    c.send_all("POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
               "Content-Length: 1000\r\n\r\n");
    ClientResponse r;
    ASSERT_TRUE(c.read_response(r, 5.0));
    expect_openai_error(r, 401, "invalid_api_key", "header-time 401");
    EXPECT_EQ(r.headers["connection"], "close");
    EXPECT_TRUE(c.wait_closed());
}

TEST(Security, ConstantTimeEqualIsEquality) {
    EXPECT_TRUE(constant_time_equal("sekret", "sekret"));
    EXPECT_FALSE(constant_time_equal("sekreT", "sekret"));
    EXPECT_FALSE(constant_time_equal("sekret", "sekre"));
    EXPECT_FALSE(constant_time_equal("sekre", "sekret"));
    EXPECT_FALSE(constant_time_equal("sekretsekret", "sekret"));  // the cyclic read must not alias
    EXPECT_FALSE(constant_time_equal("", "sekret"));
    EXPECT_TRUE(constant_time_equal("", ""));
    EXPECT_FALSE(constant_time_equal("x", ""));
    EXPECT_TRUE(constant_time_equal(std::string("a\0b", 3), std::string("a\0b", 3)));
    EXPECT_FALSE(constant_time_equal(std::string("a\0b", 3), std::string("a\0c", 3)));
}

// Every route has a limit: max_body_bytes for the prompt routes, 4 KiB for the rest. An
// announced size over it is answered at once (the body is not sent here); a chunked body is cut
// when it passes the limit; exactly the limit is fine.
TEST(Security, EveryRouteHasABodyLimit) {
    TestServerConfig cfg;
    cfg.server.max_body_bytes = 20000;
    TestServer s(cfg);
    for (const Route& r : kRoutes) {
        const bool prompt = std::string(r.method) == "POST" && std::string(r.path) != "/ping";  // the routes that take prompts
        const size_t limit = prompt ? 20000 : kSmallBodyLimitBytes;
        EXPECT_EQ(body_limit_bytes(cfg.server, r.method, r.path), limit) << r.path;
        TestConnection c(s.port());
        c.send_all(std::string(r.method) + " " + r.path + " HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n" +
                   "Content-Length: " + std::to_string(limit + 1) + "\r\n\r\n");
        ClientResponse resp;
        ASSERT_TRUE(c.read_response(resp, 5.0)) << r.path;
        expect_openai_error(resp, 413, "request_too_large", r.path);
        const std::string msg = J::parse(resp.body)["error"]["message"];
        EXPECT_NE(msg.find(std::to_string(limit + 1) + " bytes"), std::string::npos) << msg;
        EXPECT_NE(msg.find("limit of " + std::to_string(limit) + " bytes"), std::string::npos) << msg;
        EXPECT_NE(msg.find(std::string(r.method) + " " + r.path), std::string::npos) << msg;
    }
    // Exactly the limit: accepted (JSON padded with spaces to 20000 bytes).
    std::string body = R"({"prompt":"hi"})";
    body.insert(1, std::string(20000 - body.size(), ' '));
    ASSERT_EQ(body.size(), 20000u);
    EXPECT_EQ(http_call(s.port(), "POST", "/tokenize", body).status, 200);
    // Chunked, no announced size: cut at the limit.
    TestConnection c(s.port());
    c.send_all("POST /tokenize HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
               "Transfer-Encoding: chunked\r\n\r\n");
    const std::string chunk(8000, ' ');
    for (int i = 0; i < 3; ++i) c.send_all(fmt::format("{:x}\r\n{}\r\n", chunk.size(), chunk));
    ClientResponse resp;
    ASSERT_TRUE(c.read_response(resp, 5.0));
    expect_openai_error(resp, 413, "request_too_large", "chunked");
    EXPECT_NE(J::parse(resp.body)["error"]["message"].get<std::string>().find("limit of 20000 bytes"),
              std::string::npos);
}

// A client that sends "Expect: 100-continue" hears "100 Continue" once the headers are admitted,
// and only then sends its body; a refused one hears its final status instead.
TEST(Security, ExpectContinueIsAnsweredAfterAdmission) {
    TestServer s(keyed(false));
    const std::string body = R"({"prompt":"hi"})";
    const std::string head = "POST /tokenize HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                             "Expect: 100-continue\r\nContent-Length: " + std::to_string(body.size()) + "\r\n";
    TestConnection ok(s.port());
    ok.send_all(head + kAuth + "\r\n");
    ASSERT_TRUE(ok.read_until([](const std::string& b) { return b.find("\r\n\r\n") != std::string::npos; }));
    EXPECT_EQ(ok.buffer().rfind("HTTP/1.1 100 Continue\r\n\r\n", 0), 0u) << ok.buffer();
    ok.buffer().clear();
    ok.send_all(body);
    ClientResponse r;
    ASSERT_TRUE(ok.read_response(r));
    EXPECT_EQ(r.status, 200) << r.body;
    TestConnection refused(s.port());
    refused.send_all(head + "\r\n");
    ASSERT_TRUE(refused.read_response(r));
    expect_openai_error(r, 401, "invalid_api_key", "expect-continue without key");
}

// Captures what the process writes to stderr (where log lines go) while `fn` runs.
template <typename Fn>
std::string capture_stderr(Fn fn) {
    char path[] = "/tmp/qs_security_log_XXXXXX";
    const int fd = ::mkstemp(path);
    std::fflush(stderr);
    const int saved = ::dup(2);
    ::dup2(fd, 2);
    fn();
    std::fflush(stderr);
    ::dup2(saved, 2);
    ::close(saved);
    ::close(fd);
    std::string text = qs::test::read_if_exists(path);
    std::remove(path);
    return text;
}

std::string run_requests_and_log(bool log_prompts) {
    const LogLevel before = log_level();
    set_log_level(LogLevel::kDebug);
    std::string log = capture_stderr([&] {
        TestServerConfig cfg;
        cfg.server.log_prompts = log_prompts;
        TestServer s(cfg);
        EXPECT_EQ(http_call(s.port(), "POST", "/v1/chat/completions",
                            R"({"model":"test-model","messages":[{"role":"user","content":"SECRET-CHAT-4711"}]})")
                      .status,
                  200);
        EXPECT_EQ(http_call(s.port(), "POST", "/v1/completions", R"({"model":"test-model","prompt":"SECRET-TEXT-4712"})")
                      .status,
                  200);
        // A refused request's body must not be logged either.
        EXPECT_EQ(http_call(s.port(), "POST", "/v1/completions", R"({"model":"test-model","prompt":"SECRET-BAD-4713","n":0})")
                      .status,
                  400);
        EXPECT_TRUE(s.wait_idle());
    });
    set_log_level(before);
    return log;
}

TEST(Security, PromptsAreAbsentFromLogsUnlessAskedFor) {
    const std::string quiet = run_requests_and_log(false);
    EXPECT_NE(quiet.find("api=chat"), std::string::npos) << quiet;  // the request-log lines are there
    EXPECT_NE(quiet.find("api=completions"), std::string::npos) << quiet;
    for (const char* secret : {"SECRET-CHAT", "SECRET-TEXT", "SECRET-BAD"})
        EXPECT_EQ(quiet.find(secret), std::string::npos) << secret << " in:\n" << quiet;

    const std::string loud = run_requests_and_log(true);
    EXPECT_NE(loud.find("SECRET-CHAT-4711"), std::string::npos) << loud;
    EXPECT_NE(loud.find("SECRET-TEXT-4712"), std::string::npos) << loud;
}

}  // namespace
}  // namespace qs::testing

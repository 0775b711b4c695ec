// The load generator against a live loopback server (HttpServer + FakeEngine, as the server tests
// use) that streams at a scripted rate: one token per running request per engine step. The
// engine's emit hook records what the server produced; the test asserts the client measured the
// same thing: exact token and chunk counts, and rates and inter-token gaps within a tolerance of
// the server's own. That is the evidence the client is not the bottleneck at this load.
#include "bench/loadgen.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <mutex>

#include "../server/test_server.h"

namespace qs::bench {
namespace {

struct Emits {
    std::mutex mu;
    std::map<std::string, std::vector<double>> times;  // request id -> emit time per token
    int64_t tokens = 0;
    std::chrono::steady_clock::time_point t0 = std::chrono::steady_clock::now();
};

std::vector<FixtureRequest> repeat_fixture(int64_t n, int64_t max_tokens,
                                           const std::string& model) {
    std::vector<FixtureRequest> v;
    for (int64_t i = 0; i < n; ++i) {
        FixtureRequest r;
        r.endpoint = "/v1/chat/completions";
        r.body = {{"model", model},
                  {"max_tokens", max_tokens},
                  {"ignore_eos", true},
                  {"messages",
                   nlohmann::json::array(
                       {{{"role", "user"}, {"content", "[[repeat]] " + std::to_string(i)}}})}};
        v.push_back(std::move(r));
    }
    return v;
}

struct Measured {
    Summary client;
    double server_rate = 0;      // tokens / (last emit - first emit)
    double server_itl_mean = 0;  // pooled gaps between a request's emits
    int64_t server_tokens = 0;
};

Measured run(int64_t clients, int64_t requests, int64_t max_tokens, int step_us, int threads) {
    Emits emits;
    testing::TestServerConfig cfg;
    cfg.engine.step_interval = std::chrono::microseconds(step_us);
    cfg.engine.max_running = 512;
    cfg.engine.on_emit = [&emits](const RequestOutput& out) {
        if (out.token_ids.empty()) return;
        double t =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - emits.t0).count();
        std::lock_guard lock(emits.mu);
        for (size_t k = 0; k < out.token_ids.size(); ++k) emits.times[out.request_id].push_back(t);
        emits.tokens += int64_t(out.token_ids.size());
    };
    testing::TestServer server(cfg);
    LoadgenOptions o;
    o.url = parse_url("http://127.0.0.1:" + std::to_string(server.port())).value();
    o.clients = clients;
    o.requests = requests;
    o.threads = threads;
    o.pass_timeout_s = 60;
    auto pass = run_pass(o, repeat_fixture(requests, max_tokens, "test-model"));
    EXPECT_TRUE(pass.is_ok());
    Measured m;
    m.client = summarize(pass->records, clients);
    for (const auto& r : pass->records) {
        EXPECT_TRUE(r.error.empty()) << r.error;
        EXPECT_EQ(r.completion_tokens, max_tokens);
        EXPECT_EQ(r.finish_reason, "length");
        EXPECT_EQ(int64_t(r.itl_s.size()) + 1, max_tokens);  // one chunk per token per step
    }
    EXPECT_TRUE(server.wait_idle());
    std::lock_guard lock(emits.mu);
    double first = 1e30, last = 0, gaps = 0;
    int64_t num_gaps = 0;
    for (const auto& [id, ts] : emits.times) {
        first = std::min(first, ts.front()), last = std::max(last, ts.back());
        for (size_t k = 1; k < ts.size(); ++k) gaps += ts[k] - ts[k - 1], ++num_gaps;
    }
    m.server_tokens = emits.tokens;
    m.server_rate = double(emits.tokens) / (last - first);
    m.server_itl_mean = gaps / double(num_gaps);
    return m;
}

TEST(BenchLoadgen, MeasuresWhatTheServerProduced) {
    Measured m = run(/*clients=*/16, /*requests=*/64, /*max_tokens=*/40, /*step_us=*/5000, 1);
    EXPECT_EQ(m.client.num_completed, 64);
    EXPECT_EQ(m.client.total_completion_tokens, 64 * 40);
    EXPECT_EQ(m.server_tokens, 64 * 40);
    EXPECT_EQ(m.client.itl.count, 64 * 39);
    // The client's gaps are the server's gaps shifted by a near-constant delivery delay.
    EXPECT_NEAR(m.client.itl.mean, m.server_itl_mean, 0.1 * m.server_itl_mean);
    // The engine's step is at least 5 ms, so no request sees more than one token per 5 ms.
    EXPECT_GE(m.client.itl.mean, 0.0049);
    // Client duration includes connect, TTFT and the last [DONE]; within 15% of the emit span.
    EXPECT_NEAR(m.client.output_throughput, m.server_rate, 0.15 * m.server_rate);
    EXPECT_TRUE(m.client.steady_valid);
    std::printf(
        "16 clients: client %.0f tok/s (steady %.0f), server %.0f tok/s; ITL client %.3f ms, "
        "server %.3f ms\n",
        m.client.output_throughput, m.client.steady_output_throughput, m.server_rate,
        m.client.itl.mean * 1e3, m.server_itl_mean * 1e3);
}

TEST(BenchLoadgen, ManyClientsOnTwoThreads) {
    // 128 streams through a server sharing a small loaded machine: delivery delay varies more
    // at the start and end of each request, so longer requests and wider tolerances.
    Measured m = run(/*clients=*/128, /*requests=*/256, /*max_tokens=*/60, /*step_us=*/4000, 2);
    EXPECT_EQ(m.client.num_completed, 256);
    EXPECT_EQ(m.client.total_completion_tokens, 256 * 60);
    EXPECT_EQ(m.server_tokens, 256 * 60);
    EXPECT_NEAR(m.client.itl.mean, m.server_itl_mean, 0.15 * m.server_itl_mean);
    EXPECT_NEAR(m.client.output_throughput, m.server_rate, 0.2 * m.server_rate);
    std::printf(
        "128 clients: client %.0f tok/s (steady %.0f), server %.0f tok/s; ITL client %.3f ms, "
        "server %.3f ms\n",
        m.client.output_throughput, m.client.steady_output_throughput, m.server_rate,
        m.client.itl.mean * 1e3, m.server_itl_mean * 1e3);
}

TEST(BenchLoadgen, HttpAndConnectErrorsAreCountedByKind) {
    testing::TestServer server;
    LoadgenOptions o;
    o.url = parse_url("http://127.0.0.1:" + std::to_string(server.port()) + "/v1").value();
    o.clients = 2;
    o.requests = 4;
    auto pass = run_pass(o, repeat_fixture(2, 5, "no-such-model"));
    ASSERT_TRUE(pass.is_ok());
    Summary s = summarize(pass->records, 2);
    EXPECT_EQ(s.num_completed, 0);
    EXPECT_EQ(s.errors["http_404"], 4) << pass->records[0].error;

    o.url = parse_url("127.0.0.1:1").value();  // nothing listens on port 1
    auto refused = run_pass(o, repeat_fixture(2, 5, "test-model"));
    ASSERT_TRUE(refused.is_ok());
    EXPECT_EQ(summarize(refused->records, 2).errors["connect"], 4);
}

TEST(BenchLoadgen, PassTimeoutCutsOpenStreams) {
    testing::TestServerConfig cfg;
    cfg.engine.step_interval = std::chrono::microseconds(20000);
    testing::TestServer server(cfg);
    LoadgenOptions o;
    o.url = parse_url("http://127.0.0.1:" + std::to_string(server.port())).value();
    o.clients = 4;
    o.requests = 100;
    o.pass_timeout_s = 0.3;  // each request wants 1000 tokens x 20 ms = 20 s
    auto t0 = std::chrono::steady_clock::now();
    auto pass = run_pass(o, repeat_fixture(4, 1000, "test-model"));
    double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    ASSERT_TRUE(pass.is_ok());
    EXPECT_LT(took, 5.0);
    ASSERT_EQ(pass->records.size(), 4u);  // only the claimed requests are kept
    Summary s = summarize(pass->records, 4);
    EXPECT_EQ(s.num_completed, 0);
    EXPECT_EQ(s.num_incomplete + int64_t(s.errors.size() ? s.errors.begin()->second : 0), 4);
    for (const auto& r : pass->records) EXPECT_GT(r.latency_s, 0.2);
}

// The most requests in flight at once, from the records' [start, start + latency] intervals.
int64_t max_in_flight(const std::vector<RequestRecord>& records) {
    std::vector<std::pair<double, int>> events;
    for (const auto& r : records) {
        events.emplace_back(r.start_s, +1);
        events.emplace_back(r.start_s + r.latency_s, -1);
    }
    std::sort(events.begin(), events.end());  // an end before a start at the same instant
    int64_t now = 0, most = 0;
    for (const auto& [t, d] : events) most = std::max(most, now += d);
    return most;
}

TEST(BenchLoadgen, OpenLoopSendsAtTheArrivalTimesWhateverIsInFlight) {
    // 30 requests 25 ms apart, each ~150 ms long (30 tokens, 5 ms steps): a closed loop of one
    // client would take 4.5 s and never overlap; the open loop overlaps about six.
    testing::TestServerConfig cfg;
    cfg.engine.step_interval = std::chrono::microseconds(5000);
    cfg.engine.max_running = 512;
    testing::TestServer server(cfg);
    for (int threads : {1, 2}) {
        LoadgenOptions o;
        o.url = parse_url("http://127.0.0.1:" + std::to_string(server.port())).value();
        o.clients = 64;
        o.requests = 30;
        o.threads = threads;
        o.pass_timeout_s = 60;
        for (int64_t i = 0; i < o.requests; ++i) o.arrivals.push_back(0.025 * double(i));
        auto pass = run_pass(o, repeat_fixture(30, 30, "test-model"));
        ASSERT_TRUE(pass.is_ok());
        ASSERT_EQ(pass->records.size(), 30u);
        for (size_t i = 0; i < pass->records.size(); ++i) {
            const RequestRecord& r = pass->records[i];
            EXPECT_TRUE(r.done && r.error.empty()) << i << " " << r.error;
            EXPECT_EQ(r.completion_tokens, 30);
            // Sent at its arrival time: never early, and late only by scheduling noise (wide: a
            // shared loaded machine), far less than the ~150 ms a request takes.
            EXPECT_GE(r.start_s, o.arrivals[i] - 1e-3) << i;
            EXPECT_LT(r.start_s, o.arrivals[i] + 0.12) << i;
        }
        EXPECT_GE(max_in_flight(pass->records), 3) << "threads " << threads;
        EXPECT_TRUE(server.wait_idle());
    }
}

TEST(BenchLoadgen, OpenLoopCapsRequestsInFlightAtClients) {
    testing::TestServerConfig cfg;
    cfg.engine.step_interval = std::chrono::microseconds(5000);
    testing::TestServer server(cfg);
    LoadgenOptions o;
    o.url = parse_url("http://127.0.0.1:" + std::to_string(server.port())).value();
    o.clients = 2;
    o.requests = 6;
    o.pass_timeout_s = 60;
    o.arrivals.assign(6, 0.0);  // all at once: the cap holds four back
    auto pass = run_pass(o, repeat_fixture(6, 20, "test-model"));
    ASSERT_TRUE(pass.is_ok());
    ASSERT_EQ(pass->records.size(), 6u);
    for (const auto& r : pass->records) EXPECT_TRUE(r.done) << r.error;
    EXPECT_EQ(max_in_flight(pass->records), 2);
    o.arrivals.pop_back();
    EXPECT_FALSE(run_pass(o, repeat_fixture(6, 20, "test-model")).is_ok());  // one time per request
}

TEST(BenchLoadgen, ParseUrl) {
    auto u = parse_url("http://localhost:8000/v1");
    ASSERT_TRUE(u.is_ok());
    EXPECT_EQ(u->host, "localhost");
    EXPECT_EQ(u->port, 8000);
    EXPECT_EQ(parse_url("http://h").value().port, 80);
    EXPECT_FALSE(parse_url("https://h:1").is_ok());
    EXPECT_FALSE(parse_url("http://h:99999").is_ok());
    EXPECT_FALSE(parse_url("http://:80").is_ok());
}

}  // namespace
}  // namespace qs::bench

// Benchmark metric arithmetic on small synthetic record sets; every expected value was worked
// out by hand (the arithmetic is in the comments).
#include "bench/metrics.h"

#include <gtest/gtest.h>

namespace qs::bench {
namespace {

RequestRecord rec(double start, double ttft, std::vector<double> itl, double latency,
                  int64_t tokens, int64_t prompt = 0) {
    RequestRecord r;
    r.start_s = start;
    r.ttft_s = ttft;
    r.itl_s = std::move(itl);
    r.latency_s = latency;
    r.completion_tokens = tokens;
    r.prompt_tokens = prompt;
    r.finish_reason = "length";
    r.done = true;
    return r;
}

// A: start 0,   chunks at 0.25, 0.5, 1.0 (1 token each), ends 1.0
// B: start 0.5, chunks at 1.5, 2.0 (4 tokens: 2 per chunk), ends 2.5
// C: start 1.0, one chunk at 1.25 (1 token), ends 1.5
// D: start 1.5, HTTP 503 after 0.1 s;  E: start 2.0, stream cut without [DONE] after 0.2 s
std::vector<RequestRecord> five() {
    std::vector<RequestRecord> v;
    v.push_back(rec(0.0, 0.25, {0.25, 0.5}, 1.0, 3, 10));
    v.push_back(rec(0.5, 1.0, {0.5}, 2.0, 4, 20));
    v.push_back(rec(1.0, 0.25, {}, 0.5, 1, 5));
    RequestRecord d;
    d.start_s = 1.5, d.latency_s = 0.1, d.error = "http_503";
    v.push_back(d);
    RequestRecord e;
    e.start_s = 2.0, e.latency_s = 0.2, e.ttft_s = 0.1;
    v.push_back(e);
    return v;
}

TEST(BenchMetrics, CountsThroughputAndErrors) {
    Summary s = summarize(five(), 2);
    EXPECT_EQ(s.num_requests, 5);
    EXPECT_EQ(s.num_completed, 3);
    EXPECT_EQ(s.num_incomplete, 1);
    ASSERT_EQ(s.errors.size(), 1u);
    EXPECT_EQ(s.errors.at("http_503"), 1);
    EXPECT_EQ(s.total_completion_tokens, 8);
    EXPECT_EQ(s.total_prompt_tokens, 35);
    EXPECT_DOUBLE_EQ(s.duration_s, 2.5);          // first start 0, last end B at 2.5
    EXPECT_DOUBLE_EQ(s.request_throughput, 1.2);  // 3 / 2.5
    EXPECT_DOUBLE_EQ(s.output_throughput, 3.2);   // 8 / 2.5
}

TEST(BenchMetrics, LatencyDistributions) {
    Summary s = summarize(five(), 2);
    // TTFT {0.25, 0.25, 1.0}: p90 rank 1.8 -> 0.25 + 0.8*0.75; p99 rank 1.98 -> 0.25 + 0.98*0.75
    EXPECT_EQ(s.ttft.count, 3);
    EXPECT_DOUBLE_EQ(s.ttft.mean, 0.5);
    EXPECT_DOUBLE_EQ(s.ttft.median, 0.25);
    EXPECT_DOUBLE_EQ(s.ttft.p90, 0.85);
    EXPECT_DOUBLE_EQ(s.ttft.p99, 0.985);
    // TPOT: A (1.0-0.25)/2 = 0.375, B (2.0-1.0)/3 = 1/3; C has one token and is left out
    EXPECT_EQ(s.tpot.count, 2);
    EXPECT_DOUBLE_EQ(s.tpot.mean, (0.375 + 1.0 / 3) / 2);
    EXPECT_DOUBLE_EQ(s.tpot.median, (0.375 + 1.0 / 3) / 2);
    // ITL pooled {0.25, 0.5, 0.5}
    EXPECT_EQ(s.itl.count, 3);
    EXPECT_DOUBLE_EQ(s.itl.mean, 1.25 / 3);
    EXPECT_DOUBLE_EQ(s.itl.median, 0.5);
    EXPECT_DOUBLE_EQ(s.itl.p90, 0.5);
    // E2EL {0.5, 1.0, 2.0}
    EXPECT_DOUBLE_EQ(s.e2el.mean, 3.5 / 3);
    EXPECT_DOUBLE_EQ(s.e2el.median, 1.0);
    EXPECT_DOUBLE_EQ(s.e2el.p90, 1.8);  // rank 1.8 -> 1.0 + 0.8*1.0
    EXPECT_DOUBLE_EQ(s.e2el.min, 0.5);
    EXPECT_DOUBLE_EQ(s.e2el.max, 2.0);
}

TEST(BenchMetrics, SteadyStateWindow) {
    Summary s = summarize(five(), 2);
    // starts {0, 0.5, 1, 1.5, 2}: 2nd start 0.5 ends the ramp-up, last start 2.0 begins the tail.
    ASSERT_TRUE(s.steady_valid);
    EXPECT_DOUBLE_EQ(s.steady_begin_s, 0.5);
    EXPECT_DOUBLE_EQ(s.steady_end_s, 2.0);
    // in [0.5, 2.0]: A's chunks at 0.5, 1.0 (1 each), B's at 1.5, 2.0 (2 each), C's at 1.25 -> 7
    EXPECT_DOUBLE_EQ(s.steady_output_throughput, 7.0 / 1.5);
}

TEST(BenchMetrics, NoSteadyStateWithFewerRequestsThanClients) {
    Summary s = summarize(five(), 6);
    EXPECT_FALSE(s.steady_valid);
    EXPECT_EQ(s.steady_output_throughput, 0.0);
}

TEST(BenchMetrics, StreamingRequests) {
    // five(): A streams [0.25, 1.0), C [1.25, 1.5), B [1.5, 2.5); D failed, E never finished.
    // Summed 0.75 + 0.25 + 1.0 = 2.0 over the 2.5 s duration; C ends where B starts: one at a time.
    Summary s = summarize(five(), 2);
    EXPECT_DOUBLE_EQ(s.mean_streaming, 0.8);
    EXPECT_EQ(s.peak_streaming, 1);
    // Three requests whose streams overlap: [1, 3), [2, 4), [2.5, 3.5) (starts 0, 1, 2; ttft 1, 1, 0.5).
    // Peak 3 over [2.5, 3); summed 2 + 2 + 1 = 5 over the duration 0 .. 4 = 4 s.
    std::vector<RequestRecord> v{rec(0, 1, {2}, 3, 2), rec(1, 1, {2}, 3, 2), rec(2, 0.5, {1}, 1.5, 2)};
    Summary o = summarize(v, 1);
    EXPECT_EQ(o.peak_streaming, 3);
    EXPECT_DOUBLE_EQ(o.mean_streaming, 1.25);
}

TEST(BenchMetrics, EmptyAndPercentileEdges) {
    Summary s = summarize({}, 4);
    EXPECT_EQ(s.num_requests, 0);
    EXPECT_EQ(s.output_throughput, 0.0);
    EXPECT_EQ(percentile({}, 50), 0.0);
    EXPECT_EQ(percentile({7.0}, 99), 7.0);
    EXPECT_DOUBLE_EQ(percentile({1, 2, 3, 4}, 50), 2.5);
    EXPECT_DOUBLE_EQ(percentile({1, 2, 3, 4}, 100), 4.0);
}

TEST(BenchCost, DollarsPerMillionTokens) {
    EXPECT_DOUBLE_EQ(cost_per_million_tokens(3.6, 100.0), 10.0);  // 3.6e6 / 3.6e5
    EXPECT_DOUBLE_EQ(cost_per_million_tokens(5.0, 1000.0), 5.0e6 / 3.6e6);
    EXPECT_EQ(cost_per_million_tokens(5.0, 0.0), 0.0);
}

}  // namespace
}  // namespace qs::bench

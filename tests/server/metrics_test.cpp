// Prometheus rendering of counters, gauges and histograms.
#include <gtest/gtest.h>

#include "server/metrics.h"

namespace qs {
namespace {

TEST(Metrics, HistogramBucketsAreCumulative) {
    Histogram h({0.1, 1.0});
    h.observe(0.05);
    h.observe(0.5);
    h.observe(5.0);
    std::string out;
    h.render(out, "x", "help");
    EXPECT_NE(out.find("x_bucket{le=\"0.1\"} 1\n"), std::string::npos) << out;
    EXPECT_NE(out.find("x_bucket{le=\"1\"} 2\n"), std::string::npos) << out;
    EXPECT_NE(out.find("x_bucket{le=\"+Inf\"} 3\n"), std::string::npos) << out;
    EXPECT_NE(out.find("x_count 3\n"), std::string::npos);
    EXPECT_NE(out.find("# TYPE x histogram"), std::string::npos);
}

TEST(Metrics, RendersEngineGauges) {
    ServerMetrics m;
    EngineStats s;
    s.num_running = 3;
    s.num_waiting = 2;
    s.kv_usage = 0.25;
    s.prefix_cache_queries = 10;
    s.prefix_cache_hits = 4;
    s.prefix_cache_hash_mismatches = 7;
    s.mtp_draft_tokens = 8;
    s.mtp_accepted_tokens = 6;
    m.completion_tokens = 42;
    const std::string out = m.render(&s);
    for (const char* line : {"qwenserve_num_requests_running 3\n", "qwenserve_num_requests_waiting 2\n",
                             "qwenserve_kv_cache_usage_ratio 0.25\n", "qwenserve_prefix_cache_hit_rate 0.4\n",
                             "qwenserve_mtp_acceptance_rate 0.75\n", "qwenserve_generation_tokens_total 42\n",
                             "qwenserve_time_to_first_token_seconds_count 0\n",
                             "qwenserve_prefix_cache_hash_mismatches_total 7\n"})
        EXPECT_NE(out.find(line), std::string::npos) << line;
    EXPECT_EQ(m.render(nullptr).find("qwenserve_num_requests_running"), std::string::npos);
}

}  // namespace
}  // namespace qs

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
    s.step_seconds_prefill = 1.5;
    s.step_seconds_decode = 2.25;
    s.steps_prefill = 3;
    s.steps_decode = 9;
    s.prompt_rows_total = 4096;
    s.decode_rows_total = 17;
    m.completion_tokens = 42;
    const std::string out = m.render(&s);
    for (const char* line : {"qwenserve_num_requests_running 3\n", "qwenserve_num_requests_waiting 2\n",
                             "qwenserve_kv_cache_usage_ratio 0.25\n", "qwenserve_prefix_cache_hit_rate 0.4\n",
                             "qwenserve_mtp_acceptance_rate 0.75\n", "qwenserve_generation_tokens_total 42\n",
                             "qwenserve_time_to_first_token_seconds_count 0\n",
                             "qwenserve_prefix_cache_hash_mismatches_total 7\n",
                             "qwenserve_engine_step_seconds_total{kind=\"prefill\"} 1.5\n",
                             "qwenserve_engine_step_seconds_total{kind=\"decode\"} 2.25\n",
                             "qwenserve_engine_steps_by_kind_total{kind=\"prefill\"} 3\n",
                             "qwenserve_engine_steps_by_kind_total{kind=\"decode\"} 9\n",
                             "qwenserve_engine_step_rows_total{kind=\"prompt\"} 4096\n",
                             "qwenserve_engine_step_rows_total{kind=\"decode\"} 17\n"})
        EXPECT_NE(out.find(line), std::string::npos) << line;
    EXPECT_EQ(m.render(nullptr).find("qwenserve_num_requests_running"), std::string::npos);
}

TEST(Metrics, HistogramLabelsGoBeforeLe) {
    Histogram h({1.0});
    h.observe(0.5);
    std::string out;
    h.render(out, "x", "help", "model_name=\"m\",engine=\"0\"");
    EXPECT_NE(out.find("x_bucket{model_name=\"m\",engine=\"0\",le=\"1\"} 1\n"), std::string::npos) << out;
    EXPECT_NE(out.find("x_bucket{model_name=\"m\",engine=\"0\",le=\"+Inf\"} 1\n"), std::string::npos) << out;
    EXPECT_NE(out.find("x_sum{model_name=\"m\",engine=\"0\"} 0.5\n"), std::string::npos) << out;
    EXPECT_NE(out.find("x_count{model_name=\"m\",engine=\"0\"} 1\n"), std::string::npos) << out;
}

TEST(Metrics, OneTwoFiveBucketsStopAtTheMaximum) {
    EXPECT_EQ(one_two_five_buckets(100), (std::vector<double>{1, 2, 5, 10, 20, 50, 100}));
    EXPECT_EQ(one_two_five_buckets(262144).back(), 200000);
}

TEST(Metrics, RendersVllmSeriesWithModelName) {
    ServerMetrics m;
    EngineStats s;
    s.num_running = 3;
    s.num_waiting = 2;
    s.kv_usage = 0.25;
    s.num_prompt_tokens_total = 11;
    s.num_completion_tokens_total = 12;
    s.num_preemptions_total = 4;
    m.finished_stop = 5;
    m.finished_tool_calls = 1;
    m.finished_length = 2;
    const std::string out = m.render(&s, "a\"b");
    const std::string l = "{model_name=\"a\\\"b\",engine=\"0\"";
    for (const std::string& line :
         {"vllm:num_requests_running" + l + "} 3\n", "vllm:num_requests_waiting" + l + "} 2\n",
          "vllm:kv_cache_usage_perc" + l + "} 0.25\n", "vllm:gpu_cache_usage_perc" + l + "} 0.25\n",
          "vllm:prompt_tokens_total" + l + "} 11\n", "vllm:generation_tokens_total" + l + "} 12\n",
          "vllm:num_preemptions_total" + l + "} 4\n",
          "vllm:request_success_total" + l + ",finished_reason=\"stop\"} 6\n",
          "vllm:request_success_total" + l + ",finished_reason=\"length\"} 2\n",
          std::string("# TYPE vllm:time_to_first_token_seconds histogram\n"),
          std::string("# TYPE vllm:inter_token_latency_seconds histogram\n"),
          std::string("# TYPE vllm:time_per_output_token_seconds histogram\n"),
          std::string("# TYPE vllm:e2e_request_latency_seconds histogram\n"),
          std::string("# TYPE vllm:request_prompt_tokens histogram\n"),
          std::string("# TYPE vllm:request_generation_tokens histogram\n"),
          std::string("# TYPE vllm:request_queue_time_seconds histogram\n"),
          std::string("# TYPE vllm:request_prefill_time_seconds histogram\n"),
          std::string("# TYPE vllm:request_decode_time_seconds histogram\n"),
          std::string("# TYPE vllm:request_inference_time_seconds histogram\n"),
          "vllm:request_queue_time_seconds_bucket" + l + ",le=\"0.3\"} 0\n",
          "vllm:request_inference_time_seconds_bucket" + l + ",le=\"7680\"} 0\n",
          std::string("# TYPE qwenserve_request_queue_time_seconds histogram\n"),
          std::string("qwenserve_request_prefill_time_seconds_count 0\n"),
          std::string("qwenserve_request_decode_time_seconds_count 0\n"),
          std::string("qwenserve_request_inference_time_seconds_bucket{le=\"0.001\"} 0\n"),
          "vllm:time_to_first_token_seconds_bucket" + l + ",le=\"2560\"} 0\n"})
        EXPECT_NE(out.find(line), std::string::npos) << line;
    EXPECT_EQ(out.find("vllm:spec_decode"), std::string::npos) << "no MTP, no spec_decode series";
    // While the engine loads: no engine gauges, the request series still there.
    const std::string loading = m.render(nullptr, "x");
    EXPECT_EQ(loading.find("vllm:num_requests_running"), std::string::npos);
    EXPECT_NE(loading.find("vllm:request_success_total"), std::string::npos);
}

TEST(Metrics, RendersSpecDecodeSeriesWithMtp) {
    ServerMetrics m;
    EngineStats s;
    s.mtp_drafts = 10;
    s.mtp_draft_tokens = 20;
    s.mtp_accepted_tokens = 13;
    s.mtp_accepted_by_position = {8, 5};
    const std::string out = m.render(&s, "m");
    const std::string l = "{model_name=\"m\",engine=\"0\"";
    for (const std::string& line :
         {"vllm:spec_decode_num_drafts_total" + l + "} 10\n", "vllm:spec_decode_num_draft_tokens_total" + l + "} 20\n",
          "vllm:spec_decode_num_accepted_tokens_total" + l + "} 13\n",
          "vllm:spec_decode_num_accepted_tokens_per_pos_total" + l + ",position=\"0\"} 8\n",
          "vllm:spec_decode_num_accepted_tokens_per_pos_total" + l + ",position=\"1\"} 5\n"})
        EXPECT_NE(out.find(line), std::string::npos) << line;
}

}  // namespace
}  // namespace qs

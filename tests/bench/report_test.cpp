// Report: the table carries the headline numbers and cost lines only with a cost; the JSON keeps
// seconds and the $/M figures computed from overall and steady throughput.
#include "bench/report.h"

#include <gtest/gtest.h>

namespace qs::bench {
namespace {

Summary sample() {
    Summary s;
    s.num_completed = 10;
    s.errors["http_503"] = 2;
    s.duration_s = 2.0;
    s.total_completion_tokens = 7200;
    s.output_throughput = 3600;  // at $3.60/h: 3.6e6 / (3600 * 3600) = 0.2778 $/M
    s.steady_valid = true;
    s.steady_output_throughput = 1000;  // 3.6e6 / 3.6e6 = 1 $/M
    s.ttft.mean = 0.0125;
    s.mean_streaming = 371.3;
    s.peak_streaming = 458;
    return s;
}

TEST(BenchReport, TableHasHeadlineAndCostLines) {
    std::string t = format_table(sample(), 3.6, "Pass 1");
    EXPECT_NE(t.find("Pass 1"), std::string::npos);
    EXPECT_NE(t.find("Errors (http_503):"), std::string::npos);
    EXPECT_NE(t.find("3600.00"), std::string::npos);
    EXPECT_NE(t.find("0.2778"), std::string::npos);
    EXPECT_NE(t.find("1.0000"), std::string::npos);
    EXPECT_NE(t.find("12.50"), std::string::npos);  // TTFT in ms
    EXPECT_NE(t.find("Mean / peak streaming requests:"), std::string::npos);
    EXPECT_NE(t.find("371.3 / 458"), std::string::npos);
    EXPECT_EQ(format_table(sample(), 0, "x").find("$/M"), std::string::npos);
}

TEST(BenchReport, JsonKeepsSecondsAndCost) {
    auto j = summary_json(sample(), 3.6);
    EXPECT_EQ(j["completed"], 10);
    EXPECT_EQ(j["errors"]["http_503"], 2);
    EXPECT_DOUBLE_EQ(j["ttft"]["mean_s"].get<double>(), 0.0125);
    EXPECT_DOUBLE_EQ(j["mean_streaming"].get<double>(), 371.3);
    EXPECT_EQ(j["peak_streaming"], 458);
    EXPECT_DOUBLE_EQ(j["usd_per_m_completion_tokens"].get<double>(), 3.6e6 / (3600.0 * 3600.0));
    EXPECT_DOUBLE_EQ(j["usd_per_m_completion_tokens_steady"].get<double>(), 1.0);
    EXPECT_FALSE(summary_json(sample(), 0).contains("usd_per_m_completion_tokens"));
}

}  // namespace
}  // namespace qs::bench

// `qwenserve bench fixture` and `qwenserve campaign compare` through the real binary: the same
// seed writes the same file, bad options fail with a message, compare's exit code is the verdict.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "../common/test_files.h"
#include "../server/test_server.h"

namespace {

std::string tmp(const std::string& name) {
    return ::testing::TempDir() + "qs_bench_cli_" + std::to_string(::getpid()) + "_" + name;
}

int sh(const std::string& args) {
    int rc = std::system((std::string(QS_BINARY) + " " + args + " 2>/dev/null").c_str());
    return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

TEST(BenchCli, FixtureIsReproducible) {
    std::string a = tmp("a.jsonl"), b = tmp("b.jsonl");
    ASSERT_EQ(sh("bench fixture --out " + a + " --requests 30 --seed 11"), 0);
    ASSERT_EQ(sh("bench fixture --out " + b + " --requests 30 --seed 11"), 0);
    std::string text = qs::test::read_if_exists(a);
    EXPECT_EQ(text, qs::test::read_if_exists(b));
    EXPECT_EQ(std::count(text.begin(), text.end(), '\n'), 30);
    EXPECT_NE(sh("bench fixture --out " + a + " --requests 30 --max-prompt 5000"), 0);
    EXPECT_NE(sh("bench fixture --requests 30"), 0);  // no --out
    std::remove(a.c_str()), std::remove(b.c_str());
}

TEST(BenchCli, BenchWritesJsonAgainstALiveServer) {
    qs::testing::TestServer server;
    std::string f = tmp("f.jsonl"), out = tmp("r.json");
    std::ofstream(f) << R"({"endpoint":"/v1/chat/completions","body":{"model":"test-model",)"
                     << R"("max_tokens":12,"ignore_eos":true,"messages":[{"role":"user","content":"[[repeat]]"}]}})"
                     << "\n";
    std::string url = "http://127.0.0.1:" + std::to_string(server.port());
    ASSERT_EQ(sh("bench --url " + url + " --fixture " + f + " --clients 3 --requests 9 --passes 2 " +
                 "--gpu-hourly-cost 5 --json-out " + out + " >/dev/null"),
              0);
    std::ifstream in(out);
    auto j = nlohmann::json::parse(in, nullptr, false);
    ASSERT_FALSE(j.is_discarded());
    ASSERT_EQ(j["passes"].size(), 2u);
    EXPECT_EQ(j["result"]["completed"], 9);
    EXPECT_EQ(j["result"]["total_completion_tokens"], 9 * 12);
    EXPECT_GT(j["result"]["usd_per_m_completion_tokens"].get<double>(), 0.0);
    EXPECT_NE(sh("bench --url " + url + " --fixture " + tmp("missing.jsonl")), 0);

    // campaign record keeps what the result has: clients, TTFT percentiles, cost.
    std::string l = tmp("record.jsonl");
    std::remove(l.c_str());
    ASSERT_EQ(sh("campaign record --ledger " + l + " --config A --result " + out +
                 " --experiment manual-1"),
              0);
    std::ifstream lin(l);
    auto e = nlohmann::json::parse(lin, nullptr, false);
    ASSERT_FALSE(e.is_discarded());
    EXPECT_EQ(e["experiment"], "manual-1");
    EXPECT_EQ(e["status"], "ok");
    EXPECT_EQ(e["clients"], 3);
    EXPECT_EQ(e["completed"], 9);
    EXPECT_GT(e["ttft"]["p99_s"].get<double>(), 0.0);
    EXPECT_EQ(e["gpu_hourly_cost"], 5.0);
    std::remove(f.c_str()), std::remove(out.c_str()), std::remove(l.c_str());
}

TEST(BenchCli, CampaignCompareExitCodeIsTheVerdict) {
    std::string l = tmp("ledger.jsonl");
    std::ofstream(l) << R"({"config":"A","steady_output_throughput":1000})"
                        "\n"
                     << R"({"config":"A","steady_output_throughput":1000})"
                        "\n"
                     << R"({"config":"B","steady_output_throughput":1010})"
                        "\n"
                     << R"({"config":"B","steady_output_throughput":1012})"
                        "\n";
    EXPECT_EQ(sh("campaign compare --ledger " + l + " --control A --candidate B >/dev/null"), 0);
    EXPECT_EQ(sh("campaign compare --ledger " + l + " --control B --candidate A >/dev/null"), 1);
    EXPECT_NE(sh("campaign compare --ledger " + l + " --control A --candidate Z >/dev/null"), 0);
    std::remove(l.c_str());
}

}  // namespace

// Campaign adoption rule on synthetic ledgers: replicated gains >= 0.75% are adopted, single or
// smaller gains are not, gains above 3% need a fresh-start reproduction, and unclean runs block.
#include "bench/gates.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <fstream>

namespace qs::bench {
namespace {

LedgerEntry run(const std::string& config, double tps, bool fresh = false, int64_t errors = 0) {
    LedgerEntry e;
    e.config = config;
    e.steady_output_throughput = tps;
    e.fresh_start = fresh;
    e.num_requests = e.completed = 100;
    e.errors = errors;
    return e;
}

bool gate(const Decision& d, const std::string& name) {
    for (const auto& g : d.gates)
        if (g.name == name) return g.passed;
    ADD_FAILURE() << "no gate " << name;
    return false;
}

TEST(BenchGates, ReplicatedImprovementIsAdopted) {
    // control mean 1000; candidate runs +1.0% and +2.0% -> mean +1.5%, no fresh start needed
    auto d =
        compare({run("A", 990), run("A", 1010), run("B", 1010), run("B", 1020)}, "A", "B").value();
    EXPECT_DOUBLE_EQ(d.control_mean, 1000);
    EXPECT_NEAR(d.mean_improvement, 0.015, 1e-12);
    EXPECT_TRUE(d.adopt);
    EXPECT_EQ(d.gates.size(), campaign_gates().size());
}

TEST(BenchGates, OneRunBelowThresholdRejects) {
    // +0.5% and +3.0%: the mean (+1.75%) clears 0.75% but one replicate does not
    auto d =
        compare({run("A", 1000), run("A", 1000), run("B", 1005), run("B", 1030)}, "A", "B").value();
    EXPECT_FALSE(gate(d, "improvement"));
    EXPECT_FALSE(d.adopt);
}

TEST(BenchGates, SingleRunIsNotReplicated) {
    auto d = compare({run("A", 1000), run("A", 1000), run("B", 1020)}, "A", "B").value();
    EXPECT_FALSE(gate(d, "replicated"));
    EXPECT_TRUE(gate(d, "improvement"));
    EXPECT_FALSE(d.adopt);
}

TEST(BenchGates, LargeGainNeedsFreshStart) {
    std::vector<LedgerEntry> l = {run("A", 1000), run("A", 1000), run("B", 1050), run("B", 1060)};
    auto d = compare(l, "A", "B").value();
    EXPECT_FALSE(gate(d, "fresh_start"));  // +5.5% with no fresh-start run
    EXPECT_FALSE(d.adopt);
    l.push_back(run("B", 1020, /*fresh=*/true));  // fresh start only +2%: not a reproduction
    EXPECT_FALSE(compare(l, "A", "B").value().adopt);
    l.push_back(run("B", 1040, /*fresh=*/true));  // +4% from a fresh start
    EXPECT_TRUE(compare(l, "A", "B").value().adopt);
}

TEST(BenchGates, ErrorsBlockAndMissingConfigsAreErrors) {
    auto d = compare({run("A", 1000), run("A", 1000), run("B", 1020), run("B", 1020, false, 3)},
                     "A", "B")
                 .value();
    EXPECT_FALSE(gate(d, "clean"));
    EXPECT_FALSE(d.adopt);
    auto missing = compare({run("A", 1000)}, "A", "C");
    ASSERT_FALSE(missing.is_ok());
    EXPECT_NE(missing.status().message().find("'C'"), std::string::npos);
}

TEST(BenchLedger, AppendReadAndBadLine) {
    std::string p = ::testing::TempDir() + "qs_ledger_" + std::to_string(::getpid()) + ".jsonl";
    std::remove(p.c_str());
    ASSERT_TRUE(append_ledger(p, run("A", 1000, true)).is_ok());
    ASSERT_TRUE(append_ledger(p, run("B", 1010)).is_ok());
    auto l = read_ledger(p);
    ASSERT_TRUE(l.is_ok()) << l.status().message();
    ASSERT_EQ(l->size(), 2u);
    EXPECT_EQ((*l)[0].config, "A");
    EXPECT_TRUE((*l)[0].fresh_start);
    EXPECT_DOUBLE_EQ((*l)[1].steady_output_throughput, 1010);
    std::ofstream(p, std::ios::app) << "{\"config\": \"C\"}\n";
    auto bad = read_ledger(p);
    ASSERT_FALSE(bad.is_ok());
    EXPECT_NE(bad.status().message().find(":3:"), std::string::npos) << bad.status().message();
    std::remove(p.c_str());
}

TEST(BenchLedger, SweepFieldsRoundTripAndFailedLinesDoNotCount) {
    std::string p = ::testing::TempDir() + "qs_ledger2_" + std::to_string(::getpid()) + ".jsonl";
    std::remove(p.c_str());
    LedgerEntry a = run("A", 1000, true);
    a.experiment = "s-p1";
    a.clients = 16;
    a.knobs = {{"max_num_seqs", "64"}, {"kv_cache_dtype", "fp8_e4m3"}};  // not alphabetical
    a.ttft = {0.01, 0.02, 0.03, 0.04};
    a.gpu_hourly_cost = 5;
    a.usd_per_m_steady = 1.25;
    a.gates = {{"start", true, "/health 200"}, {"stop", false, "killed"}};
    ASSERT_TRUE(append_ledger(p, a).is_ok());
    ASSERT_TRUE(append_ledger(p, run("A", 1000)).is_ok());
    ASSERT_TRUE(append_ledger(p, run("B", 1020)).is_ok());
    ASSERT_TRUE(append_ledger(p, run("B", 1020)).is_ok());
    LedgerEntry f;
    f.config = "B";
    f.status = "failed";
    f.reason = "start: server exit code 2";
    ASSERT_TRUE(append_ledger(p, f).is_ok());
    auto l = read_ledger(p);
    ASSERT_TRUE(l.is_ok()) << l.status().message();
    ASSERT_EQ(l->size(), 5u);
    const LedgerEntry& r = (*l)[0];
    EXPECT_EQ(r.experiment, "s-p1");
    EXPECT_EQ(r.clients, 16);
    EXPECT_EQ(r.knobs, a.knobs);  // grid order kept
    EXPECT_DOUBLE_EQ(r.ttft.p90_s, 0.03);
    EXPECT_DOUBLE_EQ(r.usd_per_m_steady, 1.25);
    ASSERT_EQ(r.gates.size(), 2u);
    EXPECT_FALSE(r.gates[1].passed);
    EXPECT_EQ(r.gates[1].detail, "killed");
    EXPECT_TRUE(r.ok());
    EXPECT_FALSE((*l)[4].ok());
    EXPECT_EQ((*l)[4].reason, "start: server exit code 2");
    // The failed line has no numbers and does not count as a run of B.
    auto d = compare(*l, "A", "B").value();
    EXPECT_TRUE(d.adopt);
    EXPECT_EQ(d.gates[1].detail, "2 control, 2 candidate runs");
    EXPECT_FALSE(compare({f, run("A", 1)}, "A", "B").is_ok());

    std::ofstream(p, std::ios::app) << R"({"config":"C","status":"maybe"})" << "\n";
    auto bad = read_ledger(p);
    ASSERT_FALSE(bad.is_ok());
    EXPECT_NE(bad.status().message().find(":6:"), std::string::npos) << bad.status().message();
    std::remove(p.c_str());
}

}  // namespace
}  // namespace qs::bench

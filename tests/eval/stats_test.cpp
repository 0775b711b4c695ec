// The eval statistics against scipy: tests/data/eval/stats_reference.json is written by
// tools/eval_stats_reference.py with scipy.stats (binomtest, norm, binom), an implementation
// independent of src/eval. Exact McNemar p over ~1000 tables, normal quantiles, Agresti-Min
// intervals, Connor sample sizes (including the 218 of a ten-point gap at discordance 0.28),
// exact powers and exact sample sizes.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>

#include <nlohmann/json.hpp>

#include "eval/paired_stats.h"
#include "eval/power.h"

namespace qs::eval {
namespace {

const nlohmann::json& reference() {
    static nlohmann::json j = [] {
        std::ifstream f(std::string(QS_SOURCE_DIR) + "/tests/data/eval/stats_reference.json");
        return nlohmann::json::parse(f, nullptr, false);
    }();
    return j;
}

void expect_rel(double got, double want, double rel, const std::string& what) {
    EXPECT_LE(std::fabs(got - want), rel * std::max(std::fabs(want), 1e-300) + 1e-300)
        << what << ": got " << got << ", scipy " << want;
}

TEST(EvalStats, ReferenceFileIsThere) {
    ASSERT_FALSE(reference().is_discarded());
    EXPECT_GT(reference()["mcnemar"].size(), 900u);
}

TEST(EvalStats, McNemarExactMatchesScipyBinomtest) {
    for (const auto& row : reference()["mcnemar"]) {
        int64_t b = row[0], c = row[1];
        expect_rel(mcnemar_exact_p(b, c), row[2].get<double>(), 1e-9,
                   "b=" + std::to_string(b) + " c=" + std::to_string(c));
    }
}

TEST(EvalStats, TheIssuesExample) {
    // 4 vs 3 discordant pairs: p = 1.000 (the report behind issue 19).
    EXPECT_DOUBLE_EQ(mcnemar_exact_p(4, 3), 1.0);
    EXPECT_NEAR(mcnemar_exact_p(0, 6), 0.03125, 1e-15);
    EXPECT_NEAR(mcnemar_exact_p(1, 9), 0.021484375, 1e-15);  // 2 * 11 / 1024
}

TEST(EvalStats, NormalQuantileMatchesScipy) {
    for (const auto& row : reference()["quantiles"])
        expect_rel(normal_quantile(row[0].get<double>()), row[1].get<double>(), 1e-12,
                   "p=" + row[0].dump());
}

TEST(EvalStats, AgrestiMinIntervalMatchesReference) {
    for (const auto& row : reference()["intervals"]) {
        PairedTable t{row[0].get<int64_t>(), row[1].get<int64_t>(), row[2].get<int64_t>(),
                      row[3].get<int64_t>()};
        Interval i = paired_difference_interval(t, row[4].get<double>());
        EXPECT_NEAR(i.estimate, row[5].get<double>(), 1e-12) << row.dump();
        EXPECT_NEAR(i.low, row[6].get<double>(), 1e-12) << row.dump();
        EXPECT_NEAR(i.high, row[7].get<double>(), 1e-12) << row.dump();
    }
}

TEST(EvalStats, ConnorSampleSizeMatchesReference) {
    for (const auto& row : reference()["connor"]) {
        PowerQuestion q{row[0].get<double>(), row[1].get<double>(), row[2].get<double>(),
                        row[3].get<double>()};
        ASSERT_TRUE(validate(q).is_ok()) << row.dump();
        EXPECT_EQ(connor_sample_size(q), row[4].get<int64_t>()) << row.dump();
    }
    // The figure of the issue: a ten-point gap, 80% power, alpha 0.05 needs 218 pairs when the
    // configurations disagree on 28% of problems.
    EXPECT_EQ(connor_sample_size({0.10, 0.28, 0.05, 0.80}), 218);
}

TEST(EvalStats, ExactPowerMatchesReference) {
    for (const auto& row : reference()["exact_power"]) {
        PowerQuestion q{row[0].get<double>(), row[1].get<double>(), row[2].get<double>(), 0.8};
        EXPECT_NEAR(exact_mcnemar_power(q, row[3].get<int64_t>()), row[4].get<double>(), 1e-9)
            << row.dump();
    }
    for (const auto& row : reference()["exact_n"]) {
        PowerQuestion q{row[0].get<double>(), row[1].get<double>(), row[2].get<double>(),
                        row[3].get<double>()};
        EXPECT_EQ(exact_sample_size(q, 1000).first, row[4].get<int64_t>()) << row.dump();
    }
}

TEST(EvalStats, PowerQuestionsAreValidated) {
    EXPECT_FALSE(validate({0.10, 0.05, 0.05, 0.8}).is_ok());  // psi < |delta|
    EXPECT_FALSE(validate({0.0, 0.3, 0.05, 0.8}).is_ok());
    EXPECT_FALSE(validate({0.1, 0.3, 1.5, 0.8}).is_ok());
    EXPECT_FALSE(validate({0.1, 0.3, 0.05, 1.0}).is_ok());
    EXPECT_TRUE(validate({-0.1, 0.3, 0.05, 0.8}).is_ok());  // the sign does not matter
}

}  // namespace
}  // namespace qs::eval

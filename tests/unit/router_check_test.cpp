// compare_router_call (backend/router_check.h): what counts as a defect of a router against its
// reference (a row over the bound, a top-k change away from a near-tie, an unwritten NaN row) and
// what does not (rounding below the bound, a top-k change at a near-tie).
#include "backend/router_check.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

using namespace qs;

namespace {

// Two rows of E = 4 logits, top-2: row 0 clear (gap 1.0 of scale 3), row 1 a near-tie between
// experts 1 and 2 (gap 1e-7 of scale 2).
struct Call {
    std::vector<float> ref = {3.0f, 2.0f, 1.0f, 0.0f, 2.0f, 1.0f, 1.0f - 1e-7f * 2.0f, -1.0f};
    std::vector<float> ref_gate = {0.5f, -0.5f};
    std::vector<float> got = ref, got_gate = ref_gate;
    RouterCheckStats stats;
    std::string report;
    int64_t run() {
        return compare_router_call(got.data(), got_gate.data(), ref.data(), ref_gate.data(), 2, 4, 2,
                                   kRouterCheckBound, stats, report);
    }
};

}  // namespace

TEST(RouterCheck, EqualCallsPass) {
    Call c;
    EXPECT_EQ(c.run(), 0);
    EXPECT_EQ(c.stats.calls, 1);
    EXPECT_EQ(c.stats.rows, 2);
    EXPECT_EQ(c.stats.topk_changes, 0);
    EXPECT_EQ(c.stats.max_rel_diff, 0.0);
    EXPECT_TRUE(c.report.empty());
}

TEST(RouterCheck, RoundingBelowTheBoundPasses) {
    Call c;
    c.got[0] += 3.0f * 5e-6f;
    c.got_gate[1] += 2.0f * 5e-6f;
    EXPECT_EQ(c.run(), 0);
    EXPECT_NEAR(c.stats.max_rel_diff, 5e-6, 1e-6);
}

TEST(RouterCheck, ARowOverTheBoundIsReportedWithItsIndex) {
    Call c;
    c.got[5] += 2.0f * 1e-3f;  // row 1, expert 1
    EXPECT_EQ(c.run(), 1);
    EXPECT_EQ(c.stats.suspicious_rows, 1);
    EXPECT_NE(c.report.find("row 1 of 2"), std::string::npos) << c.report;
}

TEST(RouterCheck, TheGateLogitCounts) {
    Call c;
    c.got_gate[0] = 0.6f;
    EXPECT_EQ(c.run(), 1);
    EXPECT_NE(c.report.find("row 0 of 2"), std::string::npos) << c.report;
}

TEST(RouterCheck, ATopKChangeAtANearTieIsNotADefect) {
    Call c;
    std::swap(c.got[5], c.got[6]);  // experts 1 and 2 of row 1 trade places: 1e-7 of the scale
    EXPECT_EQ(c.run(), 0);
    EXPECT_EQ(c.stats.topk_changes, 1);
    EXPECT_LT(c.stats.max_gap_at_change, kRouterCheckBound);
    EXPECT_NE(c.report.find("near-tie"), std::string::npos) << c.report;
}

TEST(RouterCheck, AnUnwrittenRowIsADefect) {
    Call c;
    for (int e = 0; e < 4; ++e) c.got[size_t(4 + e)] = std::nanf("");
    EXPECT_EQ(c.run(), 1);
    EXPECT_TRUE(std::isinf(c.stats.max_rel_diff));
}

TEST(RouterCheck, ATopKChangeAwayFromATieIsADefect) {
    Call c;
    std::swap(c.got[1], c.got[2]);  // row 0: expert 2 overtakes expert 1... still both in the top 2
    std::swap(c.got[0], c.got[3]);  // ... but expert 3 replaces expert 0: far over the bound
    EXPECT_EQ(c.run(), 1);
    EXPECT_EQ(c.stats.topk_changes, 1);
    EXPECT_GT(c.stats.max_gap_at_change, 0.3);
}

// Open-loop arrival schedules: first at 0, non-decreasing, reproducible by seed; constant gaps
// exactly 1/rate; gamma gaps with mean 1/rate and coefficient of variation 1/sqrt(burstiness),
// and at burstiness 1 exponential by a Kolmogorov-Smirnov test against the exponential CDF.
#include "bench/arrivals.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

namespace qs::bench {
namespace {

std::vector<double> gaps(const std::vector<double>& t) {
    std::vector<double> g;
    for (size_t i = 1; i < t.size(); ++i) g.push_back(t[i] - t[i - 1]);
    return g;
}

double mean(const std::vector<double>& v) {
    double s = 0;
    for (double x : v) s += x;
    return s / double(v.size());
}

double cv(const std::vector<double>& v) {
    const double m = mean(v);
    double ss = 0;
    for (double x : v) ss += (x - m) * (x - m);
    return std::sqrt(ss / double(v.size() - 1)) / m;
}

TEST(Arrivals, ConstantGapsAreOneOverTheRate) {
    ArrivalOptions o;
    o.rate = 8;
    o.process = "constant";
    auto t = arrival_times(5, o);
    ASSERT_TRUE(t.is_ok());
    EXPECT_EQ(*t, (std::vector<double>{0, 0.125, 0.25, 0.375, 0.5}));
}

TEST(Arrivals, PoissonGapsAreExponentialWithMeanOneOverTheRate) {
    ArrivalOptions o;
    o.rate = 4;
    o.seed = 7;
    auto t = arrival_times(20001, o);
    ASSERT_TRUE(t.is_ok());
    EXPECT_EQ(t->front(), 0.0);
    EXPECT_TRUE(std::is_sorted(t->begin(), t->end()));
    std::vector<double> g = gaps(*t);
    EXPECT_NEAR(mean(g), 0.25, 0.25 * 0.03);
    EXPECT_NEAR(cv(g), 1.0, 0.03);
    // Kolmogorov-Smirnov against 1 - exp(-rate x): D < 1.95 / sqrt(n) is the 0.1 % critical value.
    std::sort(g.begin(), g.end());
    double d = 0;
    const double n = double(g.size());
    for (size_t i = 0; i < g.size(); ++i) {
        const double f = 1 - std::exp(-o.rate * g[i]);
        d = std::max({d, double(i + 1) / n - f, f - double(i) / n});
    }
    EXPECT_LT(d, 1.95 / std::sqrt(n));
}

TEST(Arrivals, BurstinessSetsTheSpreadNotTheMean) {
    for (double b : {0.25, 4.0}) {
        ArrivalOptions o;
        o.rate = 10;
        o.burstiness = b;
        auto t = arrival_times(40001, o);
        ASSERT_TRUE(t.is_ok());
        std::vector<double> g = gaps(*t);
        EXPECT_NEAR(mean(g), 0.1, 0.1 * 0.04) << b;
        EXPECT_NEAR(cv(g), 1 / std::sqrt(b), 0.05 / std::sqrt(b)) << b;
    }
}

TEST(Arrivals, SameSeedSameScheduleOtherSeedOther) {
    ArrivalOptions o;
    o.rate = 2;
    o.seed = 3;
    auto a = arrival_times(50, o), b = arrival_times(50, o);
    o.seed = 4;
    auto c = arrival_times(50, o);
    EXPECT_EQ(*a, *b);
    EXPECT_NE(*a, *c);
}

TEST(Arrivals, BadOptionsNameTheOption) {
    ArrivalOptions o;
    EXPECT_NE(arrival_times(3, o).status().message().find("--request-rate"), std::string::npos);  // rate 0
    o.rate = 1;
    o.burstiness = -1;
    EXPECT_NE(arrival_times(3, o).status().message().find("--burstiness"), std::string::npos);
    o.burstiness = 1;
    o.process = "uniform";
    EXPECT_NE(arrival_times(3, o).status().message().find("--arrival"), std::string::npos);
    o.process = "poisson";
    o.rate = INFINITY;
    EXPECT_FALSE(arrival_times(3, o).is_ok());
}

}  // namespace
}  // namespace qs::bench

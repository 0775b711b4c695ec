// Statistics of a paired comparison of two configurations on the same problems (`eval compare`):
// the 2x2 table of outcomes, the exact two-sided McNemar test (a binomial test with p = 1/2 on the
// discordant pairs), and an interval for the difference in pass rates (Agresti-Min: the Wald
// interval after adding 1/2 to every cell). Also the normal quantile and binomial helpers that
// eval/power uses. Pure functions; checked against scipy (tests/eval,
// tools/eval_stats_reference.py).
#pragma once

#include <cstdint>

namespace qs::eval {

// Outcomes of the same problems under A and B.
struct PairedTable {
    int64_t both_pass = 0;
    int64_t only_a = 0;  // A passed, B failed
    int64_t only_b = 0;  // B passed, A failed
    int64_t both_fail = 0;
    int64_t total() const { return both_pass + only_a + only_b + both_fail; }
    int64_t discordant() const { return only_a + only_b; }
};

// Exact two-sided McNemar p-value: with n = b + c discordant pairs, under H0 b ~ Bin(n, 1/2);
// p = min(1, 2 P(X <= min(b, c))). 1 when there is no discordant pair. Equals scipy's
// binomtest(b, b + c, 0.5).pvalue.
double mcnemar_exact_p(int64_t b, int64_t c);

struct Interval {
    double estimate = 0, low = 0, high = 0;
};
// Difference of pass rates p_B - p_A = (only_b - only_a) / n with a two-sided (1 - alpha)
// Agresti-Min interval (Agresti & Min 2005: each cell + 1/2, then the paired Wald interval);
// the estimate is the plain difference, the bounds are clipped to [-1, 1].
Interval paired_difference_interval(const PairedTable& t, double alpha);

// Standard normal quantile (inverse CDF) for 0 < p < 1, to ~1e-15 (Acklam's rational
// approximation refined by one Halley step on erfc).
double normal_quantile(double p);
double normal_cdf(double x);

// log of the binomial probability mass C(n, k) p^k (1 - p)^(n - k); -inf outside the support.
double log_binomial_pmf(int64_t k, int64_t n, double p);

}  // namespace qs::eval

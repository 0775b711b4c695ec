// Sample size of a paired comparison (`eval power`): how many problems, each run under A and B,
// are needed for the two-sided McNemar test at level alpha to detect a difference delta = p_B - p_A
// in pass rates with the given power. The answer depends on the discordance psi = P(A and B
// disagree on a problem) = p10 + p01, which a pass-rate difference alone does not fix
// (psi >= |delta|; two independent configurations at rates p, p + delta would have
// psi = p(1-p-delta) + (p+delta)(1-p)). Two answers:
//   Connor (1987), the normal approximation:
//       n = ceil( (z_{1-alpha/2} sqrt(psi) + z_{power} sqrt(psi - delta^2))^2 / delta^2 )
//   exact: the smallest n whose exact power (discordant count D ~ Bin(n, psi); given D = d,
//       b ~ Bin(d, (psi + delta) / (2 psi)); reject when the exact McNemar p <= alpha) reaches
//       the target. Exact power is not monotone in n (the test is discrete); we report the
//       first n that reaches it, and the first n from which every larger n up to a bound does.
// Pure functions; checked against scipy.
#pragma once

#include <cstdint>
#include <vector>

#include "core/status.h"

namespace qs::eval {

struct PowerQuestion {
    double delta = 0.10;        // difference in pass rates to detect (its sign does not matter)
    double discordance = 0.28;  // psi, the probability that A and B disagree on a problem
    double alpha = 0.05;        // two-sided significance
    double power = 0.80;        // 1 - beta
};
// Errors: alpha, power outside (0, 1); delta == 0; psi outside [|delta|, 1]; psi == delta^2.
Status validate(const PowerQuestion& q);

// Connor's normal-approximation sample size (paired problems).
int64_t connor_sample_size(const PowerQuestion& q);

// Exact power of the two-sided exact McNemar test with n paired problems.
double exact_mcnemar_power(const PowerQuestion& q, int64_t n);

struct ExactSampleSize {
    int64_t first = -1;   // smallest n with power >= target; -1 if none up to the bound
    int64_t stable = -1;  // smallest n such that every n' in [n, bound] has power >= target
    int64_t bound = 0;    // the largest n examined
};
// Searches n = 1 .. max_n.
ExactSampleSize exact_sample_size(const PowerQuestion& q, int64_t max_n);

// Power of Connor's approximation at a given n (inverse of connor_sample_size; for tables).
double connor_power(const PowerQuestion& q, int64_t n);

}  // namespace qs::eval

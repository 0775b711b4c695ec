// Paired sample size and power for the exact McNemar test (see power.h).
#include "eval/power.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "eval/paired_stats.h"

namespace qs::eval {

Status validate(const PowerQuestion& q) {
    if (!(q.alpha > 0 && q.alpha < 1)) return invalid_argument("alpha must be in (0, 1)");
    if (!(q.power > 0 && q.power < 1)) return invalid_argument("power must be in (0, 1)");
    const double d = std::fabs(q.delta);
    if (!(d > 0 && d < 1)) return invalid_argument("the difference must be in (0, 1), not 0");
    if (!(q.discordance >= d && q.discordance <= 1))
        return invalid_argument(fmt::format(
            "discordance {} must lie in [|difference|, 1] = [{}, 1]: A and B disagree at least "
            "as often as their pass rates differ",
            q.discordance, d));
    if (q.discordance <= d * d) return invalid_argument("discordance must exceed difference^2");
    return Status::ok();
}

int64_t connor_sample_size(const PowerQuestion& q) {
    const double d = std::fabs(q.delta), psi = q.discordance;
    const double za = normal_quantile(1 - q.alpha / 2), zb = normal_quantile(q.power);
    const double root = za * std::sqrt(psi) + zb * std::sqrt(psi - d * d);
    // The tiny slack keeps an exact integer (up to rounding) from being pushed to the next one.
    return int64_t(std::ceil(root * root / (d * d) - 1e-9));
}

double connor_power(const PowerQuestion& q, int64_t n) {
    const double d = std::fabs(q.delta), psi = q.discordance;
    const double za = normal_quantile(1 - q.alpha / 2);
    return normal_cdf((d * std::sqrt(double(n)) - za * std::sqrt(psi)) / std::sqrt(psi - d * d));
}

namespace {

// For d discordant pairs: the probability that the exact test rejects, given that each
// discordant pair favours B with probability pi. Rejects when min(b, d - b) <= k(d), where k(d) is
// the largest k with 2 P(Bin(d, 1/2) <= k) <= alpha (the p-value is monotone in min(b, d - b)).
double reject_probability(int64_t d, double pi, double alpha) {
    int64_t k = -1;
    double cdf = 0;  // P(Bin(d, 1/2) <= j), built up term by term
    for (int64_t j = 0; 2 * j < d; ++j) {
        cdf += std::exp(log_binomial_pmf(j, d, 0.5));
        if (std::min(1.0, 2 * cdf) <= alpha * (1 + 1e-12))
            k = j;
        else
            break;
    }
    if (k < 0) return 0.0;
    double p = 0;
    for (int64_t j = 0; j <= k; ++j)
        p += std::exp(log_binomial_pmf(j, d, pi)) + std::exp(log_binomial_pmf(d - j, d, pi));
    return std::min(1.0, p);
}

class ExactPower {
   public:
    explicit ExactPower(const PowerQuestion& q)
        : q_(q), pi_((q.discordance + std::fabs(q.delta)) / (2 * q.discordance)) {}
    double power(int64_t n) {
        while (int64_t(reject_.size()) <= n)
            reject_.push_back(reject_probability(int64_t(reject_.size()), pi_, q_.alpha));
        double p = 0;
        for (int64_t d = 0; d <= n; ++d) {
            double w = std::exp(log_binomial_pmf(d, n, q_.discordance));
            if (w > 0) p += w * reject_[size_t(d)];
        }
        return std::min(1.0, p);
    }

   private:
    PowerQuestion q_;
    double pi_;
    std::vector<double> reject_;  // index d: P(reject | d discordant pairs)
};

}  // namespace

double exact_mcnemar_power(const PowerQuestion& q, int64_t n) {
    QS_CHECK(n >= 0);
    ExactPower e(q);
    return e.power(n);
}

ExactSampleSize exact_sample_size(const PowerQuestion& q, int64_t max_n) {
    ExactPower e(q);
    ExactSampleSize r;
    r.bound = max_n;
    for (int64_t n = 1; n <= max_n; ++n) {
        bool ok = e.power(n) >= q.power;
        if (ok && r.first < 0) r.first = n;
        if (ok && r.stable < 0) r.stable = n;
        if (!ok) r.stable = -1;
    }
    return r;
}

}  // namespace qs::eval

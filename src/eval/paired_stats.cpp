// Paired-comparison statistics (see paired_stats.h).
#include "eval/paired_stats.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>

#include "core/check.h"

namespace qs::eval {

double log_binomial_pmf(int64_t k, int64_t n, double p) {
    if (k < 0 || k > n) return -std::numeric_limits<double>::infinity();
    if (p <= 0) return k == 0 ? 0.0 : -std::numeric_limits<double>::infinity();
    if (p >= 1) return k == n ? 0.0 : -std::numeric_limits<double>::infinity();
    double lc =
        std::lgamma(double(n) + 1) - std::lgamma(double(k) + 1) - std::lgamma(double(n - k) + 1);
    return lc + double(k) * std::log(p) + double(n - k) * std::log1p(-p);
}

double mcnemar_exact_p(int64_t b, int64_t c) {
    QS_CHECK(b >= 0 && c >= 0);
    const int64_t n = b + c;
    // |b - c| <= 1: P(X <= min) >= 1/2 by symmetry (exactly 1/2 for odd n), so p = 1 exactly.
    if (n == 0 || std::llabs(b - c) <= 1) return 1.0;
    const int64_t m = std::min(b, c);
    // P(X <= m) for X ~ Bin(n, 1/2), summed from the largest term down (log-sum-exp).
    const double top = log_binomial_pmf(m, n, 0.5);
    double s = 0;
    for (int64_t k = m; k >= 0; --k) {
        double r = std::exp(log_binomial_pmf(k, n, 0.5) - top);
        s += r;
        if (r < 1e-18 * s) break;  // the terms only shrink further from the mode
    }
    return std::min(1.0, 2.0 * std::exp(top) * s);
}

Interval paired_difference_interval(const PairedTable& t, double alpha) {
    QS_CHECK(alpha > 0 && alpha < 1);
    Interval r;
    const double n = double(t.total());
    if (n <= 0) return {0, -1, 1};
    r.estimate = double(t.only_b - t.only_a) / n;
    const double n2 = n + 2;
    const double pb = (double(t.only_b) + 0.5) / n2, pa = (double(t.only_a) + 0.5) / n2;
    const double d = pb - pa;
    const double var = std::max(0.0, (pb + pa - d * d) / n2);
    const double half = normal_quantile(1 - alpha / 2) * std::sqrt(var);
    r.low = std::max(-1.0, d - half);
    r.high = std::min(1.0, d + half);
    return r;
}

double normal_cdf(double x) { return 0.5 * std::erfc(-x / std::sqrt(2.0)); }

double normal_quantile(double p) {
    QS_CHECK_MSG(p > 0 && p < 1, "normal_quantile needs 0 < p < 1");
    // Acklam's coefficients.
    static const double a[] = {-3.969683028665376e+01, 2.209460984245205e+02,
                               -2.759285104469687e+02, 1.383577518672690e+02,
                               -3.066479806614716e+01, 2.506628277459239e+00};
    static const double b[] = {-5.447609879822406e+01, 1.615858368580409e+02,
                               -1.556989798598866e+02, 6.680131188771972e+01,
                               -1.328068155288572e+01};
    static const double c[] = {-7.784894002430293e-03, -3.223964580411365e-01,
                               -2.400758277161838e+00, -2.549732539343734e+00,
                               4.374664141464968e+00,  2.938163982698783e+00};
    static const double d[] = {7.784695709041462e-03, 3.224671290700398e-01, 2.445134137142996e+00,
                               3.754408661907416e+00};
    const double lo = 0.02425, hi = 1 - lo;
    double x;
    if (p < lo) {
        double q = std::sqrt(-2 * std::log(p));
        x = (((((c[0] * q + c[1]) * q + c[2]) * q + c[3]) * q + c[4]) * q + c[5]) /
            ((((d[0] * q + d[1]) * q + d[2]) * q + d[3]) * q + 1);
    } else if (p <= hi) {
        double q = p - 0.5, r = q * q;
        x = (((((a[0] * r + a[1]) * r + a[2]) * r + a[3]) * r + a[4]) * r + a[5]) * q /
            (((((b[0] * r + b[1]) * r + b[2]) * r + b[3]) * r + b[4]) * r + 1);
    } else {
        double q = std::sqrt(-2 * std::log1p(-p));
        x = -(((((c[0] * q + c[1]) * q + c[2]) * q + c[3]) * q + c[4]) * q + c[5]) /
            ((((d[0] * q + d[1]) * q + d[2]) * q + d[3]) * q + 1);
    }
    // One Halley step brings the relative error from ~1e-9 to machine precision.
    double e = normal_cdf(x) - p;
    double u = e * std::sqrt(2 * M_PI) * std::exp(x * x / 2);
    return x - u / (1 + x * u / 2);
}

}  // namespace qs::eval

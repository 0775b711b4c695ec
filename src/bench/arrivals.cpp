// Arrival schedules (see arrivals.h). std::gamma_distribution over mt19937_64: the same seed gives
// the same schedule with the same standard library.
#include "bench/arrivals.h"

#include <cmath>
#include <random>

#include <fmt/format.h>

namespace qs::bench {

Result<std::vector<double>> arrival_times(int64_t n, const ArrivalOptions& o) {
    if (!(o.rate > 0) || !std::isfinite(o.rate))
        return invalid_argument(fmt::format("--request-rate must be a positive number of requests per second, not {}", o.rate));
    if (!(o.burstiness > 0) || !std::isfinite(o.burstiness))
        return invalid_argument(fmt::format("--burstiness must be positive, not {}", o.burstiness));
    if (o.process != "poisson" && o.process != "constant")
        return invalid_argument("--arrival must be poisson or constant, not '" + o.process + "'");
    if (n < 0) return invalid_argument("the number of requests must not be negative");
    std::vector<double> out;
    out.reserve(size_t(n));
    // Gamma(shape k, scale θ) has mean kθ: θ = 1 / (rate k) keeps the mean gap at 1 / rate; its
    // coefficient of variation is 1 / sqrt(k).
    std::mt19937_64 rng(o.seed);
    std::gamma_distribution<double> gap(o.burstiness, 1.0 / (o.rate * o.burstiness));
    double t = 0;
    for (int64_t i = 0; i < n; ++i) {
        out.push_back(t);
        t += o.process == "constant" ? 1.0 / o.rate : gap(rng);
    }
    return out;
}

}  // namespace qs::bench

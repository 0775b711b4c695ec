// Open-loop arrival schedules for the load generator: when each request of a pass is sent,
// independent of when earlier ones finish. Gamma-distributed gaps with mean 1/rate and shape
// `burstiness` (1: exponential gaps, a Poisson process; < 1 burstier, > 1 more regular), as
// vLLM's benchmark_serving; or a constant gap. Pure function of its options (bench main thread).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"

namespace qs::bench {

struct ArrivalOptions {
    double rate = 0;          // requests per second, > 0
    double burstiness = 1.0;  // gamma shape, > 0 (poisson only)
    std::string process = "poisson";  // "poisson" (gamma gaps) or "constant"
    uint64_t seed = 0;
};

// Send times in seconds from the start of the pass, non-decreasing, the first at 0.
Result<std::vector<double>> arrival_times(int64_t num_requests, const ArrivalOptions& options);

}  // namespace qs::bench

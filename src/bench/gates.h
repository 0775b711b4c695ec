// The campaign's gates and adoption rule, as data plus one function. A candidate configuration
// is adopted over the control only if every gate passes:
//   clean         every candidate run completed all its requests: no errors, none incomplete
//   replicated    at least kMinReplicates runs of each configuration
//   improvement   every candidate run beats the control mean by >= kMinImprovement (0.75%)
//                 on steady output throughput (a replicated improvement, not one lucky run)
//   fresh_start   a claimed mean improvement above kFreshStartAbove (3%) must be reproduced by a
//                 candidate run on a freshly started server that itself shows > 3%
// Used by `qwenserve campaign compare`, `campaign sweep` and `campaign report` on the main thread.
#pragma once

#include <string>
#include <vector>

#include "bench/ledger.h"
#include "core/status.h"

namespace qs::bench {

inline constexpr double kMinImprovement = 0.0075;
inline constexpr double kFreshStartAbove = 0.03;
inline constexpr int kMinReplicates = 2;

struct GateSpec {
    const char* name;
    const char* rule;
};
// The gates in the order they are checked (and printed).
const std::vector<GateSpec>& campaign_gates();

struct Decision {
    bool adopt = false;
    double control_mean = 0, candidate_mean = 0;
    double mean_improvement = 0;  // candidate_mean / control_mean - 1
    std::vector<GateResult> gates;
};

// Only entries with status "ok" count (a failed experiment has no numbers to compare).
// Errors: no such entries for a configuration label.
Result<Decision> compare(const std::vector<LedgerEntry>& ledger, const std::string& control,
                         const std::string& candidate);

}  // namespace qs::bench

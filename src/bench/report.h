// Benchmark report: a Summary as a printed table (vllm bench serve's layout) and as JSON for
// --json-out and the campaign ledger. Called on the bench main thread after each pass.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "bench/metrics.h"

namespace qs::bench {

// hourly_cost <= 0: no cost lines.
std::string format_table(const Summary& s, double hourly_cost, const std::string& title);
nlohmann::json summary_json(const Summary& s, double hourly_cost);

}  // namespace qs::bench

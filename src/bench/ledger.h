// The campaign ledger: one JSONL line per benchmark run of a named configuration, so results
// from different days and server starts can be compared by `qwenserve campaign compare` and
// drawn by `qwenserve campaign report`.
//   {"config": "A", "run": "2026-11-30T06:40Z-1", "fresh_start": true,
//    "steady_output_throughput": 1234.5, "output_throughput": 1200.0,
//    "num_requests": 4096, "completed": 4096, "incomplete": 0, "errors": 0,
//    "experiment": "s1-p2", "status": "ok", "clients": 64,
//    "knobs": {"max_num_seqs": "64", "prefix_caching": "off"},
//    "ttft": {"mean_s": .., "median_s": .., "p90_s": .., "p99_s": ..},
//    "gpu_hourly_cost": 5.0, "usd_per_m_completion_tokens_steady": 1.13,
//    "gates": [{"name": "start", "passed": true, "detail": "healthy after 1.2 s"}, ...]}
// Everything after "errors" is optional (older lines and `campaign record` without them read
// back as defaults). A line with "status": "failed" records an experiment that a gate stopped:
// "reason" says which and why, and it carries no throughput (its numbers are not results), so
// readers that compare throughput skip it.
// Read and written on the CLI's main thread.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/status.h"

namespace qs::bench {

// One gate of a campaign experiment or of the adoption rule.
struct GateResult {
    std::string name;
    bool passed = false;
    std::string detail;
};

struct LatencyPercentiles {  // seconds
    double mean_s = 0, median_s = 0, p90_s = 0, p99_s = 0;
};

struct LedgerEntry {
    std::string config;                   // configuration label (control / candidate name)
    std::string run;                      // free-form run id
    bool fresh_start = false;             // measured on a freshly started server
    double steady_output_throughput = 0;  // tokens/s: the figure of merit
    double output_throughput = 0;
    int64_t num_requests = 0, completed = 0, incomplete = 0, errors = 0;

    std::string experiment;     // groups the runs of one server start (a sweep point); may be empty
    std::string status = "ok";  // "ok" or "failed"
    std::string reason;         // failed: the gate that failed and why
    int64_t clients = 0;        // offered concurrency; 0: not recorded
    std::vector<std::pair<std::string, std::string>> knobs;  // sweep knob -> value, grid order
    LatencyPercentiles ttft;
    double gpu_hourly_cost = 0;   // 0: not given
    double usd_per_m_steady = 0;  // $/M completion tokens at steady throughput; 0: no cost
    std::vector<GateResult> gates;

    bool ok() const { return status == "ok"; }
};

// Errors name the file and line.
Result<std::vector<LedgerEntry>> read_ledger(const std::string& path);
Status append_ledger(const std::string& path, const LedgerEntry& entry);
std::string ledger_line(const LedgerEntry& entry);  // one JSON line, no newline

}  // namespace qs::bench

// The campaign ledger: one JSONL line per benchmark run of a named configuration, so results
// from different days and server starts can be compared by `qwenserve campaign compare`.
//   {"config": "A", "run": "2026-11-30T06:40Z-1", "fresh_start": true,
//    "steady_output_throughput": 1234.5, "output_throughput": 1200.0,
//    "num_requests": 4096, "completed": 4096, "incomplete": 0, "errors": 0}
// Read and written on the CLI's main thread.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"

namespace qs::bench {

struct LedgerEntry {
    std::string config;                   // configuration label (control / candidate name)
    std::string run;                      // free-form run id
    bool fresh_start = false;             // measured on a freshly started server
    double steady_output_throughput = 0;  // tokens/s: the figure of merit
    double output_throughput = 0;
    int64_t num_requests = 0, completed = 0, incomplete = 0, errors = 0;
};

// Errors name the file and line.
Result<std::vector<LedgerEntry>> read_ledger(const std::string& path);
Status append_ledger(const std::string& path, const LedgerEntry& entry);

}  // namespace qs::bench

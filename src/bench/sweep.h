// One point of `qwenserve campaign sweep`, taken through the gates: the sweep starts its own
// `qwenserve serve` with the point's knobs, then
//   start       the process is up and GET /health answers 200 within start_timeout_s
//   functional  one fixture request completes: [DONE], usage, > 0 tokens, not blank
//   warmup      a pass of warmup_requests at the highest client count, every request completed
//   measured    two passes of `requests` at each client count, every request completed (and,
//               with screen_measured, the output screen passes on each)
//   endurance   (endurance_requests > 0) one long pass at the highest client count: every
//               request completed and the output screen passes (bench/output_screen.h; with
//               dummy weights only its stream-contract verdicts gate: serves_dummy_weights)
//   stop        SIGTERM; the server exits within stop_timeout_s (else it is SIGKILLed)
// The first failing gate ends the point (the server is still stopped); its measured numbers are
// then not results: the ledger gets one "failed" line with the reason. A passing point gets one
// ledger line per measured pass. Runs on the sweep's main thread (the load generator runs its
// own threads while a pass lasts).
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "bench/fixtures.h"
#include "bench/ledger.h"
#include "bench/metrics.h"
#include "bench/sweep_grid.h"

namespace qs::bench {

inline constexpr int kMeasuredReplicates = 2;

// Whether serve arguments load dummy weights (`--load-format dummy` or `--load-format=dummy`):
// their replies are random text, so the output screen's content verdicts (blank, loop) are
// reported but do not gate; the stream contract (malformed) still does.
bool serves_dummy_weights(const std::vector<std::string>& serve_args);

struct SweepOptions {
    std::string binary;                   // the qwenserve executable (our own /proc/self/exe)
    std::string model;                    // serve --model
    std::vector<std::string> serve_args;  // extra serve arguments, after the point's knobs
    int port = 0;                         // 0: a free loopback port per point
    std::string log_dir;                  // <log_dir>/<experiment>.server.log
    std::string sweep_id;                 // experiment ids are <sweep_id>-p<k>
    std::vector<int64_t> clients;         // offered concurrencies, ascending
    int64_t requests = 0;                 // per measured pass; > every client count
    int64_t warmup_requests = 0;          // 0: no warm-up pass
    int64_t endurance_requests = 0;       // 0: no endurance pass
    bool screen_measured = false;         // screen the measured passes too
    int threads = 1;                      // load generator I/O threads
    double start_timeout_s = 300, stop_timeout_s = 30, pass_timeout_s = 0;
    double gpu_hourly_cost = 0;
    std::string api_key;
};

struct MeasuredPass {
    int64_t clients = 0;
    int replicate = 0;  // 1, 2
    Summary summary;
};

struct PointOutcome {
    std::string experiment;  // "<sweep_id>-p<k>"
    GridPoint point;
    bool ok = false;
    std::string reason;  // failed: "<gate>: <why>"
    std::vector<GateResult> gates;
    std::vector<MeasuredPass> measured;  // only kept when ok
    std::string log_path;
};

// The ledger config of a point at one concurrency: "<label>@c<clients>" (compare matches runs
// of the same configuration at the same offered load).
std::string point_config(const std::string& label, int64_t clients);

// index: 1-based point number (names the experiment). progress: one line per gate and pass.
PointOutcome run_point(const SweepOptions& options, const GridPoint& point, int index,
                       const std::vector<FixtureRequest>& fixture, std::FILE* progress);

// The ledger lines of an outcome: one per measured pass, or one "failed" line.
std::vector<LedgerEntry> ledger_entries(const PointOutcome& outcome, const SweepOptions& options);

}  // namespace qs::bench

// The campaign ledger grouped for people: experiments (the runs of one server configuration,
// e.g. one sweep point; ledger lines without an experiment id group by config), each with its
// gates, its numbers per offered concurrency (means over the replicate runs) and its decision
// against a control experiment: at each client count, the adoption rule (bench/gates.h) on the
// candidate's runs against the control's runs at the same count. The control is the one named,
// or else the first experiment that passed its gates. Used by `campaign report` (HTML and
// Markdown) and by the summary `campaign sweep` prints; pure, on the CLI's main thread.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "bench/ledger.h"
#include "core/status.h"

namespace qs::bench {

struct LevelSummary {
    int64_t clients = 0;  // 0: not recorded
    std::string config;   // the ledger config of these runs
    int64_t num_runs = 0;
    double steady_tps = 0, output_tps = 0;  // means over the runs
    LatencyPercentiles ttft;                // means over the runs
    double usd_per_m = 0;                   // mean $/M at steady throughput; 0: no cost known
    bool adopt = false;
    std::string decision;  // "control", "ADOPT +2.10%", "REJECT +0.31% (improvement)", ...
};

struct ExperimentSummary {
    std::string id;     // experiment id, or the config when the lines have none
    std::string label;  // "max_num_seqs=64,prefix_caching=off", or the config
    bool ok = true;     // no failed line and at least one measured run
    std::string reason;
    std::vector<GateResult> gates;
    std::vector<LevelSummary> levels;  // ascending clients
    bool is_control = false;
    std::string decision;  // "control", "ADOPT", "REJECT", "failed", "no control"
};

struct CampaignSummary {
    std::string control;                         // experiment id; empty when no experiment passed
    std::vector<ExperimentSummary> experiments;  // in order of first appearance
    int64_t num_runs = 0;                        // ledger lines
};

// control: an experiment id or label; empty: the first experiment that passed. hourly_cost > 0
// recomputes $/M from each run's steady throughput (else the recorded figures are used).
// Errors: the named control does not exist or failed its gates.
Result<CampaignSummary> summarize_campaign(const std::vector<LedgerEntry>& ledger,
                                           const std::string& control, double hourly_cost);

std::string knob_label(const LedgerEntry& e);  // "k=v,k=v", or e.config without knobs

}  // namespace qs::bench

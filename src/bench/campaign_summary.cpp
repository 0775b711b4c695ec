// Ledger → experiments, levels and decisions (see campaign_summary.h).
#include "bench/campaign_summary.h"

#include <algorithm>
#include <map>

#include <fmt/format.h>

#include "bench/gates.h"
#include "bench/metrics.h"

namespace qs::bench {

std::string knob_label(const LedgerEntry& e) {
    if (e.knobs.empty()) return e.config;
    std::string s;
    for (const auto& [k, v] : e.knobs) s += (s.empty() ? "" : ",") + k + "=" + v;
    return s;
}

namespace {

std::string experiment_id(const LedgerEntry& e) {
    return e.experiment.empty() ? e.config : e.experiment;
}

// The adoption rule between two sets of runs, whatever their config labels are (the same
// configuration may be both, measured in two sweeps).
void decide(const std::vector<const LedgerEntry*>& control,
            const std::vector<const LedgerEntry*>& candidate, LevelSummary& level) {
    std::vector<LedgerEntry> runs;
    auto add = [&](const std::vector<const LedgerEntry*>& from, const char* as) {
        for (auto* e : from) {
            runs.push_back(*e);
            runs.back().config = as;
        }
    };
    add(control, "control");
    add(candidate, "candidate");
    auto d = compare(runs, "control", "candidate");
    if (!d.is_ok()) {
        level.decision = d.status().message();
        return;
    }
    std::string failed;
    for (const auto& g : d->gates)
        if (!g.passed) failed += (failed.empty() ? "" : ", ") + g.name;
    level.adopt = d->adopt;
    level.decision = d->adopt
                         ? fmt::format("ADOPT {:+.2f}%", d->mean_improvement * 100)
                         : fmt::format("REJECT {:+.2f}% ({})", d->mean_improvement * 100, failed);
}

}  // namespace

Result<CampaignSummary> summarize_campaign(const std::vector<LedgerEntry>& ledger,
                                           const std::string& control, double hourly_cost) {
    CampaignSummary out;
    out.num_runs = int64_t(ledger.size());
    std::map<std::string, size_t> index;  // experiment id -> position in out.experiments
    // runs[i][clients]: the measured runs of experiment i at that client count
    std::vector<std::map<int64_t, std::vector<const LedgerEntry*>>> runs;
    for (const auto& e : ledger) {
        const std::string id = experiment_id(e);
        auto [it, fresh] = index.emplace(id, out.experiments.size());
        if (fresh) {
            ExperimentSummary x;
            x.id = id;
            x.label = knob_label(e);
            x.gates = e.gates;
            out.experiments.push_back(std::move(x));
            runs.emplace_back();
        }
        ExperimentSummary& x = out.experiments[it->second];
        if (!e.ok()) {
            x.ok = false;
            if (x.reason.empty()) x.reason = e.reason;
            x.gates = e.gates;  // the failed line has the gates up to the failure
            continue;
        }
        runs[it->second][e.clients].push_back(&e);
    }
    for (size_t i = 0; i < out.experiments.size(); ++i) {
        ExperimentSummary& x = out.experiments[i];
        if (runs[i].empty()) x.ok = false;
        for (const auto& [clients, rs] : runs[i]) {
            LevelSummary l;
            l.clients = clients;
            l.config = rs.front()->config;
            l.num_runs = int64_t(rs.size());
            const double n = double(rs.size());
            for (auto* e : rs) {
                l.steady_tps += e->steady_output_throughput / n;
                l.output_tps += e->output_throughput / n;
                l.ttft.mean_s += e->ttft.mean_s / n;
                l.ttft.median_s += e->ttft.median_s / n;
                l.ttft.p90_s += e->ttft.p90_s / n;
                l.ttft.p99_s += e->ttft.p99_s / n;
                l.usd_per_m += (hourly_cost > 0 ? cost_per_million_tokens(
                                                      hourly_cost, e->steady_output_throughput)
                                                : e->usd_per_m_steady) /
                               n;
            }
            x.levels.push_back(std::move(l));
        }
        if (!x.ok) x.decision = "failed";
    }

    // The control: named (by id, else by label), or the first experiment that passed.
    const size_t none = out.experiments.size();
    auto find = [&](auto pred) {
        for (size_t i = 0; i < out.experiments.size(); ++i)
            if (pred(out.experiments[i])) return i;
        return none;
    };
    size_t c = control.empty() ? find([](const ExperimentSummary& x) { return x.ok; })
                               : find([&](const ExperimentSummary& x) { return x.id == control; });
    if (c == none && !control.empty())
        c = find([&](const ExperimentSummary& x) { return x.label == control; });
    if (!control.empty() && c == none)
        return not_found("no experiment '" + control + "' in the ledger");
    if (c == none) {
        for (auto& x : out.experiments)
            if (x.ok) x.decision = "no control";
        return out;
    }
    if (!out.experiments[c].ok)
        return invalid_argument("control experiment '" + out.experiments[c].id +
                                "' failed its gates: " + out.experiments[c].reason);
    out.control = out.experiments[c].id;
    out.experiments[c].is_control = true;
    out.experiments[c].decision = "control";
    for (auto& l : out.experiments[c].levels) l.decision = "control";
    for (size_t i = 0; i < out.experiments.size(); ++i) {
        ExperimentSummary& x = out.experiments[i];
        if (i == c || !x.ok) continue;
        bool all = true, any = false;
        for (auto& l : x.levels) {
            auto ctl = runs[c].find(l.clients);
            if (ctl == runs[c].end()) {
                l.decision = fmt::format("no control run at {} clients", l.clients);
                all = false;
                continue;
            }
            decide(ctl->second, runs[i][l.clients], l);
            any = true;
            all = all && l.adopt;
        }
        x.decision = !any ? "no control" : all ? "ADOPT" : "REJECT";
    }
    return out;
}

}  // namespace qs::bench

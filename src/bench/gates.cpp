// Adoption rule over ledger entries (see gates.h for the gates).
#include "bench/gates.h"

#include <algorithm>

#include <fmt/format.h>

namespace qs::bench {

const std::vector<GateSpec>& campaign_gates() {
    static const std::vector<GateSpec> kGates = {
        {"clean", "every candidate run completed all requests (no errors, none incomplete)"},
        {"replicated", "at least 2 runs of control and of candidate"},
        {"improvement", "every candidate run >= control mean x 1.0075 (steady tok/s)"},
        {"fresh_start", "mean improvement > 3% needs a fresh-start candidate run > 3%"},
    };
    return kGates;
}

Result<Decision> compare(const std::vector<LedgerEntry>& ledger, const std::string& control,
                         const std::string& candidate) {
    std::vector<const LedgerEntry*> a, b;
    for (const auto& e : ledger) {
        if (!e.ok()) continue;
        if (e.config == control) a.push_back(&e);
        if (e.config == candidate) b.push_back(&e);
    }
    if (a.empty()) return not_found("no measured ledger runs of control '" + control + "'");
    if (b.empty()) return not_found("no measured ledger runs of candidate '" + candidate + "'");
    auto mean = [](const std::vector<const LedgerEntry*>& v) {
        double s = 0;
        for (auto* e : v) s += e->steady_output_throughput;
        return s / double(v.size());
    };
    Decision d;
    d.control_mean = mean(a);
    d.candidate_mean = mean(b);
    if (d.control_mean <= 0) return invalid_argument("control '" + control + "' has no throughput");
    d.mean_improvement = d.candidate_mean / d.control_mean - 1.0;
    auto gain = [&](const LedgerEntry* e) {
        return e->steady_output_throughput / d.control_mean - 1.0;
    };

    int64_t dirty = 0;
    for (auto* e : b) dirty += e->errors > 0 || e->incomplete > 0 || e->completed < e->num_requests;
    d.gates.push_back(
        {"clean", dirty == 0, fmt::format("{} of {} candidate runs unclean", dirty, b.size())});

    bool replicated = int(a.size()) >= kMinReplicates && int(b.size()) >= kMinReplicates;
    d.gates.push_back({"replicated", replicated,
                       fmt::format("{} control, {} candidate runs", a.size(), b.size())});

    double worst = 1e300;
    for (auto* e : b) worst = std::min(worst, gain(e));
    d.gates.push_back({"improvement", worst >= kMinImprovement,
                       fmt::format("worst candidate run {:+.2f}%, mean {:+.2f}%", worst * 100,
                                   d.mean_improvement * 100)});

    bool fresh_ok = true;
    std::string fresh_detail = "not needed (mean improvement <= 3%)";
    if (d.mean_improvement > kFreshStartAbove) {
        double best_fresh = -1e300;
        for (auto* e : b)
            if (e->fresh_start) best_fresh = std::max(best_fresh, gain(e));
        fresh_ok = best_fresh > kFreshStartAbove;
        fresh_detail = best_fresh == -1e300
                           ? "no fresh-start candidate run"
                           : fmt::format("best fresh-start run {:+.2f}%", best_fresh * 100);
    }
    d.gates.push_back({"fresh_start", fresh_ok, fresh_detail});

    d.adopt =
        std::all_of(d.gates.begin(), d.gates.end(), [](const GateResult& g) { return g.passed; });
    return d;
}

}  // namespace qs::bench

// compare_router_call (see router_check.h).
#include "backend/router_check.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include <fmt/format.h>

namespace qs {

int64_t compare_router_call(const float* got, const float* got_gate, const float* ref, const float* ref_gate,
                            int64_t T, int64_t E, int64_t top_k, double bound, RouterCheckStats& stats,
                            std::string& report) {
    constexpr int kReportedRows = 4;
    int64_t suspicious = 0;
    stats.calls += 1;
    for (int64_t t = 0; t < T; ++t) {
        const float* r = ref + t * E;
        const float* g = got + t * E;
        double scale = std::fabs(double(ref_gate[t])), diff = std::fabs(double(got_gate[t]) - ref_gate[t]);
        for (int64_t e = 0; e < E; ++e) {
            scale = std::max(scale, std::fabs(double(r[e])));
            diff = std::max(diff, std::fabs(double(g[e]) - r[e]));
        }
        // NaN anywhere (an unwritten row of a poisoned buffer) counts as an infinite difference.
        bool finite = std::isfinite(got_gate[t]);
        for (int64_t e = 0; e < E; ++e) finite = finite && std::isfinite(g[e]);
        const double rel = finite ? diff / std::max(scale, 1e-30) : INFINITY;
        stats.rows += 1;
        stats.max_rel_diff = std::max(stats.max_rel_diff, rel);
        bool changed = false;
        double gap = 0.0;
        if (top_k < E) {
            changed = top_k_set(r, E, top_k) != top_k_set(g, E, top_k);
            std::vector<float> s(r, r + E);
            std::sort(s.begin(), s.end(), std::greater<float>());
            gap = (double(s[size_t(top_k - 1)]) - s[size_t(top_k)]) / std::max(scale, 1e-30);
        }
        if (changed) {
            stats.topk_changes += 1;
            stats.max_gap_at_change = std::max(stats.max_gap_at_change, gap);
        }
        if (rel > bound || (changed && gap > bound)) {
            stats.suspicious_rows += 1;
            if (suspicious++ < kReportedRows)
                report += fmt::format("{}row {} of {}: relative difference {:.3g}, top-k {}, reference gap {:.3g}",
                                      report.empty() ? "" : "; ", t, T, rel, changed ? "changed" : "same", gap);
        } else if (changed && suspicious == 0 && report.empty()) {
            report = fmt::format("row {} of {}: top-k changed at a near-tie (reference gap {:.3g})", t, T, gap);
        }
    }
    return suspicious;
}

}  // namespace qs

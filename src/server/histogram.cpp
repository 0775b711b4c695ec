// Fixed-bucket histograms (see histogram.h).
#include "server/histogram.h"

#include <fmt/format.h>

namespace qs {

Histogram::Histogram(std::vector<double> upper_bounds)
    : bounds_(std::move(upper_bounds)), buckets_(bounds_.size() + 1) {}

void Histogram::observe(double value) {
    size_t i = 0;
    while (i < bounds_.size() && value > bounds_[i]) ++i;
    buckets_[i].fetch_add(1, std::memory_order_relaxed);
    count_.fetch_add(1, std::memory_order_relaxed);
    sum_.fetch_add(value, std::memory_order_relaxed);
}

void Histogram::render(std::string& out, const std::string& name, const std::string& help,
                       const std::string& labels) const {
    out += fmt::format("# HELP {0} {1}\n# TYPE {0} histogram\n", name, help);
    const std::string le_prefix = labels.empty() ? "" : labels + ",";
    const std::string braces = labels.empty() ? "" : "{" + labels + "}";
    uint64_t cumulative = 0;
    for (size_t i = 0; i < bounds_.size(); ++i) {
        cumulative += buckets_[i].load(std::memory_order_relaxed);
        out += fmt::format("{}_bucket{{{}le=\"{}\"}} {}\n", name, le_prefix, bounds_[i], cumulative);
    }
    cumulative += buckets_.back().load(std::memory_order_relaxed);
    out += fmt::format("{}_bucket{{{}le=\"+Inf\"}} {}\n", name, le_prefix, cumulative);
    out += fmt::format("{0}_sum{1} {2}\n{0}_count{1} {3}\n", name, braces, sum(), cumulative);
}

std::vector<double> one_two_five_buckets(double max_value) {
    std::vector<double> out;
    for (double scale = 1;; scale *= 10) {
        for (double m : {1.0, 2.0, 5.0}) {
            if (m * scale > max_value) return out;
            out.push_back(m * scale);
        }
    }
}

}  // namespace qs

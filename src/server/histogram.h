// A Prometheus histogram with fixed buckets, updated with relaxed atomics (no locks on the
// request path) and rendered in text exposition format 0.0.4. Any thread may observe; render may
// run concurrently (values are eventually consistent).
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

namespace qs {

// 1, 2, 5, 10, 20, 50, ... up to max_value (vLLM's build_1_2_5_buckets).
std::vector<double> one_two_five_buckets(double max_value);

class Histogram {
public:
    explicit Histogram(std::vector<double> upper_bounds);
    void observe(double value);
    // Appends the _bucket/_sum/_count lines (plus HELP/TYPE). `labels` (e.g.
    // `model_name="m",engine="0"`) go on every line, before `le`.
    void render(std::string& out, const std::string& name, const std::string& help,
                const std::string& labels = "") const;
    uint64_t count() const { return count_.load(std::memory_order_relaxed); }
    double sum() const { return sum_.load(std::memory_order_relaxed); }

private:
    std::vector<double> bounds_;
    std::vector<std::atomic<uint64_t>> buckets_;  // [bounds_.size() + 1], last is +Inf
    std::atomic<uint64_t> count_{0};
    std::atomic<double> sum_{0.0};
};

}  // namespace qs

// Prometheus metrics of the server: counters and fixed-bucket histograms updated with relaxed
// atomics (no locks on the request path), rendered as text exposition format 0.0.4 by GET
// /metrics together with the engine's gauges (EngineStats, read at scrape time).
// Any thread may observe; render may run concurrently (values are eventually consistent).
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "engine/engine_api.h"

namespace qs {

class Histogram {
public:
    explicit Histogram(std::vector<double> upper_bounds);
    void observe(double value);
    // Appends the _bucket/_sum/_count lines (plus HELP/TYPE).
    void render(std::string& out, const std::string& name, const std::string& help) const;
    uint64_t count() const { return count_.load(std::memory_order_relaxed); }
    double sum() const { return sum_.load(std::memory_order_relaxed); }

private:
    std::vector<double> bounds_;
    std::vector<std::atomic<uint64_t>> buckets_;  // [bounds_.size() + 1], last is +Inf
    std::atomic<uint64_t> count_{0};
    std::atomic<double> sum_{0.0};
};

struct ServerMetrics {
    ServerMetrics();

    Histogram ttft_s;            // arrival → first generated token leaves the server
    Histogram tpot_s;            // per output token after the first
    Histogram e2e_s;             // arrival → last token
    std::atomic<uint64_t> prompt_tokens{0};
    std::atomic<uint64_t> completion_tokens{0};
    // Finished generation requests by how they ended.
    std::atomic<uint64_t> finished_stop{0}, finished_length{0}, finished_tool_calls{0},
        finished_abort{0}, finished_error{0};
    std::atomic<uint64_t> http_requests{0};
    std::atomic<uint64_t> http_4xx{0}, http_5xx{0};
    std::atomic<uint64_t> client_disconnects{0};
    std::atomic<uint64_t> request_timeouts{0};  // ended by --request-timeout-s
    std::atomic<int64_t> in_flight{0};  // generation requests accepted and not finished

    // engine: null while loading.
    std::string render(const EngineStats* engine) const;
};

}  // namespace qs

// Benchmark metric arithmetic (see metrics.h). Definitions follow `vllm bench serve`:
//   TTFT  per completed request: first content chunk time - start.
//   TPOT  per completed request with > 1 completion token: (latency - ttft) / (tokens - 1).
//   ITL   every gap between consecutive content chunks of completed requests, pooled.
//   E2EL  per completed request: latency.
//   request / output throughput: completed requests, completion tokens over the whole duration.
// Steady state. Ramp-up ends at t_full, the start time of the `concurrency`-th request to start
// (from then on every client is busy); the tail begins at t_last, the start time of the last
// request to start (after it no new work is offered and concurrency decays). The window is
// [t_full, t_last]. Each completed request's completion tokens are spread evenly over its content
// chunks (usage is exact, chunks may carry several tokens), and a chunk counts if its arrival
// time lies inside the window. Steady throughput = counted tokens / (t_last - t_full). With fewer
// requests than clients, or t_last == t_full, there is no steady state (steady_valid = false).
// Streaming requests (Summary::mean_streaming, peak_streaming): completed requests between their
// first content chunk and their end; the mean is their summed intervals over the duration.
#include "bench/metrics.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace qs::bench {

double percentile(const std::vector<double>& sorted, double p) {
    if (sorted.empty()) return 0.0;
    double rank = p / 100.0 * double(sorted.size() - 1);
    size_t lo = size_t(std::floor(rank));
    size_t hi = std::min(lo + 1, sorted.size() - 1);
    double frac = rank - double(lo);
    return sorted[lo] + (sorted[hi] - sorted[lo]) * frac;
}

Distribution distribution(std::vector<double> values) {
    Distribution d;
    if (values.empty()) return d;
    std::sort(values.begin(), values.end());
    d.count = int64_t(values.size());
    d.mean = std::accumulate(values.begin(), values.end(), 0.0) / double(values.size());
    d.median = percentile(values, 50);
    d.p90 = percentile(values, 90);
    d.p99 = percentile(values, 99);
    d.min = values.front();
    d.max = values.back();
    return d;
}

namespace {

bool completed(const RequestRecord& r) { return r.error.empty() && r.done; }

void steady_state(const std::vector<RequestRecord>& records, int64_t concurrency, Summary& s) {
    if (concurrency <= 0 || int64_t(records.size()) < concurrency) return;
    std::vector<double> starts;
    starts.reserve(records.size());
    for (const auto& r : records) starts.push_back(r.start_s);
    std::sort(starts.begin(), starts.end());
    double t_full = starts[size_t(concurrency - 1)];
    double t_last = starts.back();
    if (!(t_last > t_full)) return;
    double tokens = 0;
    for (const auto& r : records) {
        if (!completed(r) || r.ttft_s < 0) continue;
        double per_chunk = double(r.completion_tokens) / double(r.itl_s.size() + 1);
        double t = r.start_s + r.ttft_s;
        if (t >= t_full && t <= t_last) tokens += per_chunk;
        for (double gap : r.itl_s) {
            t += gap;
            if (t >= t_full && t <= t_last) tokens += per_chunk;
        }
    }
    s.steady_valid = true;
    s.steady_begin_s = t_full;
    s.steady_end_s = t_last;
    s.steady_output_throughput = tokens / (t_last - t_full);
}

// Summary::mean_streaming and peak_streaming over the completed requests' [first chunk, end)
// intervals (an interval that ends where another starts does not overlap it).
void streaming(const std::vector<RequestRecord>& records, Summary& s) {
    std::vector<std::pair<double, int>> edges;  // (time, +1 open / -1 close); closes sort first
    double busy = 0;
    for (const auto& r : records) {
        if (!completed(r) || r.ttft_s < 0) continue;
        const double open = r.start_s + r.ttft_s, close = r.start_s + r.latency_s;
        if (!(close > open)) continue;
        busy += close - open;
        edges.emplace_back(open, +1);
        edges.emplace_back(close, -1);
    }
    std::sort(edges.begin(), edges.end());
    int64_t now = 0;
    for (const auto& [t, d] : edges) s.peak_streaming = std::max(s.peak_streaming, now += d);
    if (s.duration_s > 0) s.mean_streaming = busy / s.duration_s;
}

}  // namespace

Summary summarize(const std::vector<RequestRecord>& records, int64_t concurrency) {
    Summary s;
    s.num_requests = int64_t(records.size());
    if (records.empty()) return s;
    double first_start = records.front().start_s, last_end = records.front().start_s;
    std::vector<double> ttft, tpot, itl, e2el;
    for (const auto& r : records) {
        first_start = std::min(first_start, r.start_s);
        last_end = std::max(last_end, r.start_s + r.latency_s);
        if (!r.error.empty()) {
            ++s.errors[r.error];
            continue;
        }
        if (!r.done) {
            ++s.num_incomplete;
            continue;
        }
        ++s.num_completed;
        s.total_prompt_tokens += r.prompt_tokens;
        s.total_completion_tokens += r.completion_tokens;
        if (r.ttft_s >= 0) ttft.push_back(r.ttft_s);
        if (r.completion_tokens > 1 && r.ttft_s >= 0)
            tpot.push_back((r.latency_s - r.ttft_s) / double(r.completion_tokens - 1));
        itl.insert(itl.end(), r.itl_s.begin(), r.itl_s.end());
        e2el.push_back(r.latency_s);
    }
    s.duration_s = last_end - first_start;
    if (s.duration_s > 0) {
        s.request_throughput = double(s.num_completed) / s.duration_s;
        s.output_throughput = double(s.total_completion_tokens) / s.duration_s;
    }
    s.ttft = distribution(std::move(ttft));
    s.tpot = distribution(std::move(tpot));
    s.itl = distribution(std::move(itl));
    s.e2el = distribution(std::move(e2el));
    steady_state(records, concurrency, s);
    streaming(records, s);
    return s;
}

double cost_per_million_tokens(double hourly_cost, double tokens_per_s) {
    if (tokens_per_s <= 0) return 0.0;
    return hourly_cost * 1'000'000.0 / (tokens_per_s * 3600.0);
}

}  // namespace qs::bench

// Table and JSON forms of a benchmark Summary (see report.h). Latencies are printed in
// milliseconds, as vllm prints them; the JSON keeps seconds.
#include "bench/report.h"

#include <fmt/format.h>

namespace qs::bench {

namespace {
void dist_rows(std::string& out, const char* name, const Distribution& d) {
    out += fmt::format("{:<40}{:>14.2f}\n", fmt::format("Mean {} (ms):", name), d.mean * 1e3);
    out += fmt::format("{:<40}{:>14.2f}\n", fmt::format("Median {} (ms):", name), d.median * 1e3);
    out += fmt::format("{:<40}{:>14.2f}\n", fmt::format("P90 {} (ms):", name), d.p90 * 1e3);
    out += fmt::format("{:<40}{:>14.2f}\n", fmt::format("P99 {} (ms):", name), d.p99 * 1e3);
}

nlohmann::json dist_json(const Distribution& d) {
    return {{"count", d.count}, {"mean_s", d.mean}, {"median_s", d.median}, {"p90_s", d.p90},
            {"p99_s", d.p99},   {"min_s", d.min},   {"max_s", d.max}};
}
}  // namespace

std::string format_table(const Summary& s, double hourly_cost, const std::string& title) {
    std::string out = fmt::format("{:=^54}\n", " " + title + " ");
    auto row = [&](const std::string& k, const std::string& v) {
        out += fmt::format("{:<40}{:>14}\n", k, v);
    };
    row("Requests completed:", std::to_string(s.num_completed));
    row("Requests incomplete:", std::to_string(s.num_incomplete));
    for (const auto& [kind, n] : s.errors) row("Errors (" + kind + "):", std::to_string(n));
    row("Duration (s):", fmt::format("{:.2f}", s.duration_s));
    row("Total prompt tokens:", std::to_string(s.total_prompt_tokens));
    row("Total completion tokens:", std::to_string(s.total_completion_tokens));
    row("Request throughput (req/s):", fmt::format("{:.2f}", s.request_throughput));
    row("Output token throughput (tok/s):", fmt::format("{:.2f}", s.output_throughput));
    row("Steady output throughput (tok/s):",
        s.steady_valid ? fmt::format("{:.2f}", s.steady_output_throughput) : std::string("n/a"));
    row("Mean / peak streaming requests:", fmt::format("{:.1f} / {}", s.mean_streaming, s.peak_streaming));
    if (hourly_cost > 0) {
        row("$/M completion tokens (overall):",
            fmt::format("{:.4f}", cost_per_million_tokens(hourly_cost, s.output_throughput)));
        if (s.steady_valid)
            row("$/M completion tokens (steady):",
                fmt::format("{:.4f}",
                            cost_per_million_tokens(hourly_cost, s.steady_output_throughput)));
    }
    dist_rows(out, "TTFT", s.ttft);
    dist_rows(out, "TPOT", s.tpot);
    dist_rows(out, "ITL", s.itl);
    dist_rows(out, "E2EL", s.e2el);
    out += std::string(54, '=') + "\n";
    return out;
}

nlohmann::json summary_json(const Summary& s, double hourly_cost) {
    nlohmann::json j = {{"num_requests", s.num_requests},
                        {"completed", s.num_completed},
                        {"incomplete", s.num_incomplete},
                        {"errors", s.errors},
                        {"duration_s", s.duration_s},
                        {"total_prompt_tokens", s.total_prompt_tokens},
                        {"total_completion_tokens", s.total_completion_tokens},
                        {"request_throughput", s.request_throughput},
                        {"output_throughput", s.output_throughput},
                        {"steady_valid", s.steady_valid},
                        {"steady_begin_s", s.steady_begin_s},
                        {"steady_end_s", s.steady_end_s},
                        {"steady_output_throughput", s.steady_output_throughput},
                        {"mean_streaming", s.mean_streaming},
                        {"peak_streaming", s.peak_streaming},
                        {"ttft", dist_json(s.ttft)},
                        {"tpot", dist_json(s.tpot)},
                        {"itl", dist_json(s.itl)},
                        {"e2el", dist_json(s.e2el)}};
    if (hourly_cost > 0) {
        j["gpu_hourly_cost"] = hourly_cost;
        j["usd_per_m_completion_tokens"] =
            cost_per_million_tokens(hourly_cost, s.output_throughput);
        j["usd_per_m_completion_tokens_steady"] =
            s.steady_valid ? cost_per_million_tokens(hourly_cost, s.steady_output_throughput) : 0.0;
    }
    return j;
}

}  // namespace qs::bench

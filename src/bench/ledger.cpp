// Ledger JSONL reading and appending (see ledger.h). ordered_json keeps the knobs in grid order.
#include "bench/ledger.h"

#include <fstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace qs::bench {

using Json = nlohmann::ordered_json;

Result<std::vector<LedgerEntry>> read_ledger(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    if (!f) return not_found("cannot open ledger '" + path + "'");
    std::vector<LedgerEntry> out;
    std::string line;
    for (int64_t n = 1; std::getline(f, line); ++n) {
        if (line.empty()) continue;
        Json j = Json::parse(line, nullptr, false);
        auto bad = [&](const std::string& what) {
            return corrupt_data(fmt::format("{}:{}: {}", path, n, what));
        };
        if (j.is_discarded() || !j.is_object()) return bad("not a JSON object");
        if (!j.contains("config") || !j["config"].is_string())
            return bad("missing string 'config'");
        LedgerEntry e;
        e.status = j.value("status", std::string("ok"));
        if (e.status != "ok" && e.status != "failed")
            return bad("'status' must be \"ok\" or \"failed\", got \"" + e.status + "\"");
        if (e.ok() &&
            (!j.contains("steady_output_throughput") || !j["steady_output_throughput"].is_number()))
            return bad("missing number 'steady_output_throughput'");
        try {
            e.config = j["config"].get<std::string>();
            e.run = j.value("run", std::string());
            e.fresh_start = j.value("fresh_start", false);
            e.steady_output_throughput = j.value("steady_output_throughput", 0.0);
            e.output_throughput = j.value("output_throughput", 0.0);
            e.num_requests = j.value("num_requests", int64_t(0));
            e.completed = j.value("completed", int64_t(0));
            e.incomplete = j.value("incomplete", int64_t(0));
            e.errors = j.value("errors", int64_t(0));
            e.experiment = j.value("experiment", std::string());
            e.reason = j.value("reason", std::string());
            e.clients = j.value("clients", int64_t(0));
            if (auto k = j.find("knobs"); k != j.end() && k->is_object())
                for (const auto& [name, v] : k->items())
                    e.knobs.emplace_back(name, v.is_string() ? v.get<std::string>() : v.dump());
            if (auto t = j.find("ttft"); t != j.end() && t->is_object()) {
                e.ttft.mean_s = t->value("mean_s", 0.0);
                e.ttft.median_s = t->value("median_s", 0.0);
                e.ttft.p90_s = t->value("p90_s", 0.0);
                e.ttft.p99_s = t->value("p99_s", 0.0);
            }
            e.gpu_hourly_cost = j.value("gpu_hourly_cost", 0.0);
            e.usd_per_m_steady = j.value("usd_per_m_completion_tokens_steady", 0.0);
            if (auto g = j.find("gates"); g != j.end() && g->is_array())
                for (const auto& x : *g)
                    e.gates.push_back({x.value("name", std::string()), x.value("passed", false),
                                       x.value("detail", std::string())});
        } catch (const Json::exception& ex) {  // a field of the wrong type
            return bad(ex.what());
        }
        out.push_back(std::move(e));
    }
    return out;
}

std::string ledger_line(const LedgerEntry& e) {
    Json j = {{"config", e.config}, {"run", e.run}, {"fresh_start", e.fresh_start}};
    if (e.ok()) {
        j["steady_output_throughput"] = e.steady_output_throughput;
        j["output_throughput"] = e.output_throughput;
    }
    j["num_requests"] = e.num_requests;
    j["completed"] = e.completed;
    j["incomplete"] = e.incomplete;
    j["errors"] = e.errors;
    if (!e.experiment.empty()) j["experiment"] = e.experiment;
    j["status"] = e.status;
    if (!e.reason.empty()) j["reason"] = e.reason;
    if (e.clients > 0) j["clients"] = e.clients;
    if (!e.knobs.empty()) {
        Json k = Json::object();
        for (const auto& [name, v] : e.knobs) k[name] = v;
        j["knobs"] = k;
    }
    if (e.ok())
        j["ttft"] = {{"mean_s", e.ttft.mean_s},
                     {"median_s", e.ttft.median_s},
                     {"p90_s", e.ttft.p90_s},
                     {"p99_s", e.ttft.p99_s}};
    if (e.gpu_hourly_cost > 0) {
        j["gpu_hourly_cost"] = e.gpu_hourly_cost;
        if (e.ok()) j["usd_per_m_completion_tokens_steady"] = e.usd_per_m_steady;
    }
    if (!e.gates.empty()) {
        Json g = Json::array();
        for (const auto& x : e.gates)
            g.push_back({{"name", x.name}, {"passed", x.passed}, {"detail", x.detail}});
        j["gates"] = g;
    }
    // Server log lines and output tails can hold any bytes: never throw on invalid UTF-8.
    return j.dump(-1, ' ', false, Json::error_handler_t::replace);
}

Status append_ledger(const std::string& path, const LedgerEntry& e) {
    std::ofstream f(path, std::ios::binary | std::ios::app);
    if (!f) return io_error("cannot open ledger '" + path + "' for appending");
    f << ledger_line(e) << '\n';
    if (!f) return io_error("appending to ledger '" + path + "' failed");
    return Status::ok();
}

}  // namespace qs::bench

// Ledger JSONL reading and appending (see ledger.h).
#include "bench/ledger.h"

#include <fstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace qs::bench {

Result<std::vector<LedgerEntry>> read_ledger(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    if (!f) return not_found("cannot open ledger '" + path + "'");
    std::vector<LedgerEntry> out;
    std::string line;
    for (int64_t n = 1; std::getline(f, line); ++n) {
        if (line.empty()) continue;
        nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
        auto bad = [&](const std::string& what) {
            return corrupt_data(fmt::format("{}:{}: {}", path, n, what));
        };
        if (j.is_discarded() || !j.is_object()) return bad("not a JSON object");
        if (!j.contains("config") || !j["config"].is_string())
            return bad("missing string 'config'");
        if (!j.contains("steady_output_throughput") || !j["steady_output_throughput"].is_number())
            return bad("missing number 'steady_output_throughput'");
        LedgerEntry e;
        e.config = j["config"].get<std::string>();
        e.run = j.value("run", std::string());
        e.fresh_start = j.value("fresh_start", false);
        e.steady_output_throughput = j["steady_output_throughput"].get<double>();
        e.output_throughput = j.value("output_throughput", 0.0);
        e.num_requests = j.value("num_requests", int64_t(0));
        e.completed = j.value("completed", int64_t(0));
        e.incomplete = j.value("incomplete", int64_t(0));
        e.errors = j.value("errors", int64_t(0));
        out.push_back(std::move(e));
    }
    return out;
}

Status append_ledger(const std::string& path, const LedgerEntry& e) {
    nlohmann::json j = {{"config", e.config},
                        {"run", e.run},
                        {"fresh_start", e.fresh_start},
                        {"steady_output_throughput", e.steady_output_throughput},
                        {"output_throughput", e.output_throughput},
                        {"num_requests", e.num_requests},
                        {"completed", e.completed},
                        {"incomplete", e.incomplete},
                        {"errors", e.errors}};
    std::ofstream f(path, std::ios::binary | std::ios::app);
    if (!f) return io_error("cannot open ledger '" + path + "' for appending");
    f << j.dump() << '\n';
    if (!f) return io_error("appending to ledger '" + path + "' failed");
    return Status::ok();
}

}  // namespace qs::bench

// `qwenserve campaign`: the benchmark ledger and the adoption decision, on the main thread.
//   campaign record  --ledger L.jsonl --config NAME --result R.json [--run ID] [--fresh-start]
//                    [--experiment ID]
//                    appends the "result" pass of a `bench --json-out` file to the ledger
//   campaign compare --ledger L.jsonl --control A --candidate B
//                    prints each gate and ADOPT or REJECT; exit 0 adopt, 1 reject
//   campaign sweep   (campaign_sweep.cpp) and campaign report (campaign_report_cmd.cpp)
#include <cstdio>
#include <fstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "bench/gates.h"
#include "bench/ledger.h"
#include "cli/commands.h"
#include "core/args.h"

namespace qs::cli {

namespace {

int run_record(int argc, char** argv) {
    int code = 0;
    auto args = parse_command(campaign_record_spec(), argc, argv, code);
    if (!args) return code;
    auto ledger = args->require("ledger");
    auto config = args->require("config");
    auto result = args->require("result");
    for (const Status* s : {&ledger.status(), &config.status(), &result.status()})
        if (!s->is_ok()) return fail("campaign record", *s);
    std::ifstream f(*result);
    if (!f) return fail("campaign record", not_found("cannot open '" + *result + "'"));
    nlohmann::json j = nlohmann::json::parse(f, nullptr, false);
    if (j.is_discarded() || !j.contains("result") || !j["result"].is_object())
        return fail("campaign record",
                    corrupt_data("'" + *result + "' is not a bench --json-out file"));
    const auto& r = j["result"];
    bench::LedgerEntry e;
    e.config = *config;
    e.run = args->get_or("run", "");
    e.experiment = args->get_or("experiment", "");
    e.fresh_start = args->has("fresh-start");
    e.clients = j.value("clients", int64_t(0));
    e.steady_output_throughput = r.value("steady_output_throughput", 0.0);
    e.output_throughput = r.value("output_throughput", 0.0);
    e.num_requests = r.value("num_requests", int64_t(0));
    e.completed = r.value("completed", int64_t(0));
    e.incomplete = r.value("incomplete", int64_t(0));
    if (r.contains("errors") && r["errors"].is_object())
        for (const auto& [k, v] : r["errors"].items()) e.errors += v.get<int64_t>();
    if (r.contains("ttft") && r["ttft"].is_object()) {
        const auto& t = r["ttft"];
        e.ttft = {t.value("mean_s", 0.0), t.value("median_s", 0.0), t.value("p90_s", 0.0),
                  t.value("p99_s", 0.0)};
    }
    e.gpu_hourly_cost = r.value("gpu_hourly_cost", 0.0);
    e.usd_per_m_steady = r.value("usd_per_m_completion_tokens_steady", 0.0);
    Status s = bench::append_ledger(*ledger, e);
    if (!s.is_ok()) return fail("campaign record", s);
    return 0;
}

int run_compare(int argc, char** argv) {
    int code = 0;
    auto args = parse_command(campaign_compare_spec(), argc, argv, code);
    if (!args) return code;
    auto ledger_path = args->require("ledger");
    auto control = args->require("control");
    auto candidate = args->require("candidate");
    for (const Status* s : {&ledger_path.status(), &control.status(), &candidate.status()})
        if (!s->is_ok()) return fail("campaign compare", *s);
    auto ledger = bench::read_ledger(*ledger_path);
    if (!ledger.is_ok()) return fail("campaign compare", ledger.status());
    auto d = bench::compare(*ledger, *control, *candidate);
    if (!d.is_ok()) return fail("campaign compare", d.status());
    std::printf("control %s: %.2f tok/s   candidate %s: %.2f tok/s   (%+.2f%%)\n", control->c_str(),
                d->control_mean, candidate->c_str(), d->candidate_mean, d->mean_improvement * 100);
    for (const auto& g : d->gates)
        std::printf("  %-12s %s  %s\n", g.name.c_str(), g.passed ? "pass" : "FAIL",
                    g.detail.c_str());
    std::printf("%s\n", d->adopt ? "ADOPT" : "REJECT");
    return d->adopt ? 0 : 1;
}

}  // namespace

const CommandSpec& campaign_record_spec() {
    static const CommandSpec spec = [] {
        CommandSpec c;
        c.name = "campaign record";
        c.summary = "append the result pass of a `bench --json-out` file to the ledger";
        c.usage = "campaign record --ledger L.jsonl --config NAME --result R.json [options]";
        c.groups.push_back(
            {"Record",
             {required("ledger", "L.jsonl", "the campaign ledger (appended to)"),
              required("config", "NAME", "the configuration measured"),
              required("result", "R.json", "a bench --json-out file"),
              valued("run", "ID", "the run's id (replicates share a config)"),
              valued("experiment", "ID", "the experiment the run belongs to"),
              flag("fresh-start", "the server was started fresh for this run")}});
        return c;
    }();
    return spec;
}

const CommandSpec& campaign_compare_spec() {
    static const CommandSpec spec = [] {
        CommandSpec c;
        c.name = "campaign compare";
        c.summary = "the adoption gates of a candidate against a control; prints ADOPT (exit 0) or REJECT (exit 1)";
        c.usage = "campaign compare --ledger L.jsonl --control A --candidate B";
        c.groups.push_back({"Compare",
                            {required("ledger", "L.jsonl", "the campaign ledger"),
                             required("control", "CONFIG", "the configuration to beat"),
                             required("candidate", "CONFIG", "the configuration judged")}});
        return c;
    }();
    return spec;
}

const CommandSpec& campaign_spec() {
    static const CommandSpec spec = [] {
        CommandSpec c;
        c.name = "campaign";
        c.summary = "benchmark campaign: `campaign sweep` a knob grid, `record`, `compare` A vs B, `report` (HTML)";
        c.usage = "campaign sweep|record|compare|report [options]";
        c.description = "docs/BENCH.md describes the ledger, the gates and the report.";
        c.subcommands = {"campaign sweep", "campaign record", "campaign compare", "campaign report"};
        return c;
    }();
    return spec;
}

int run_campaign(int argc, char** argv) {
    std::string sub = argc >= 1 ? argv[0] : "";
    if (sub == "--help" || sub == "-h") {
        const std::string help = format_help(campaign_spec());
        std::fwrite(help.data(), 1, help.size(), stdout);
        return 0;
    }
    if (sub == "record") return run_record(argc - 1, argv + 1);
    if (sub == "compare") return run_compare(argc - 1, argv + 1);
    if (sub == "sweep") return run_campaign_sweep(argc - 1, argv + 1);
    if (sub == "report") return run_campaign_report(argc - 1, argv + 1);
    return fail("campaign", invalid_argument("expected 'campaign record', 'compare', 'sweep' or "
                                             "'report' (see 'qwenserve campaign --help')"));
}

}  // namespace qs::cli

// `qwenserve campaign sweep`: for each point of a knob grid, start `qwenserve serve` (this very
// binary, /proc/self/exe) with the point's knobs, take it through the gates (bench/sweep.h),
// append the outcome to the ledger and stop it; at the end print each point's outcome and its
// decision against the first point that passed.
//   campaign sweep --ledger L.jsonl --fixture F.jsonl --model DIR
//       [--grid knob=v1,v2 ...] [--grid-file G] [--clients 16[,64,...]] [--requests N]
//       [--warmup-requests N] [--endurance-requests N] [--screen] [--port P] [--log-dir D]
//       [--sweep-id ID] [--start-timeout-s 300] [--stop-timeout-s 30] [--pass-timeout-s S]
//       [--gpu-hourly-cost USD] [--threads T] [--api-key K] [-- extra serve arguments]
// Exit: 0 every point passed, 1 some point failed, 130 interrupted, 2 bad options.
// Main thread only; SIGINT/SIGTERM/SIGHUP stop the running server (bench/server_process.h).
#include <algorithm>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <thread>

#include <fmt/format.h>

#include "bench/campaign_summary.h"
#include "bench/fixtures.h"
#include "bench/ledger.h"
#include "bench/server_process.h"
#include "bench/sweep.h"
#include "bench/sweep_grid.h"
#include "cli/commands.h"
#include "core/args.h"

namespace qs::cli {

namespace {

constexpr const char* kCmd = "campaign sweep";

struct SplitArgs {
    std::vector<std::string> grid_specs;  // every --grid value, in order
    std::vector<std::string> serve_args;  // after "--"
    std::vector<char*> rest;              // for Args::parse
};

// --grid may repeat, which Args does not support: take those (and the "--" tail) out first.
Result<SplitArgs> split_args(int argc, char** argv) {
    SplitArgs s;
    for (int i = 0; i < argc; ++i) {
        std::string a = argv[i];
        if (a == "--") {
            s.serve_args.assign(argv + i + 1, argv + argc);
            break;
        }
        if (a == "--grid") {
            if (i + 1 >= argc) return invalid_argument("option --grid needs a value");
            s.grid_specs.push_back(argv[++i]);
        } else if (a.rfind("--grid=", 0) == 0) {
            s.grid_specs.push_back(a.substr(7));
        } else {
            s.rest.push_back(argv[i]);
        }
    }
    return s;
}

std::string default_sweep_id() {
    std::time_t t = std::time(nullptr);
    std::tm tm{};
    gmtime_r(&t, &tm);
    char buf[32];
    std::strftime(buf, sizeof(buf), "sweep-%Y%m%dT%H%M%SZ", &tm);
    return buf;
}

Result<bench::SweepOptions> resolve(const Args& args, const SplitArgs& split, bench::Grid& grid,
                                    std::vector<bench::FixtureRequest>& fixture,
                                    std::string& ledger) {
    bench::SweepOptions o;
    QS_ASSIGN_OR_RETURN(ledger, args.require("ledger"));
    QS_ASSIGN_OR_RETURN(std::string fixture_path, args.require("fixture"));
    QS_ASSIGN_OR_RETURN(o.model, args.require("model"));
    for (const auto& spec : split.grid_specs) QS_RETURN_IF_ERROR(bench::add_grid_spec(grid, spec));
    if (auto g = args.get("grid-file")) QS_RETURN_IF_ERROR(bench::read_grid_file(grid, *g));
    o.serve_args = split.serve_args;
    QS_RETURN_IF_ERROR(bench::check_serve_args(grid, o.serve_args));
    QS_ASSIGN_OR_RETURN(fixture, bench::read_fixture(fixture_path));
    if (fixture.empty()) return invalid_argument("the fixture '" + fixture_path + "' is empty");

    QS_ASSIGN_OR_RETURN(o.clients, parse_int_list(args.get_or("clients", "16"), "--clients"));
    std::sort(o.clients.begin(), o.clients.end());
    o.clients.erase(std::unique(o.clients.begin(), o.clients.end()), o.clients.end());
    if (o.clients.empty() || o.clients.front() < 1)
        return invalid_argument("--clients must list positive client counts");
    QS_ASSIGN_OR_RETURN(o.requests, args.get_int("requests", int64_t(fixture.size())));
    if (o.requests <= o.clients.back())
        return invalid_argument(fmt::format(
            "--requests ({}) must exceed the highest --clients ({}): a pass needs more requests "
            "than clients to have a steady state",
            o.requests, o.clients.back()));
    QS_ASSIGN_OR_RETURN(o.warmup_requests, args.get_int("warmup-requests", o.requests));
    QS_ASSIGN_OR_RETURN(o.endurance_requests, args.get_int("endurance-requests", 0));
    if (o.warmup_requests < 0 || o.endurance_requests < 0)
        return invalid_argument("--warmup-requests and --endurance-requests must be >= 0");
    o.screen_measured = args.has("screen");
    QS_ASSIGN_OR_RETURN(int64_t port, args.get_int("port", 0));
    if (port < 0 || port > 65535) return invalid_argument("--port must be in [0, 65535]");
    o.port = int(port);
    QS_ASSIGN_OR_RETURN(
        int64_t threads,
        args.get_int("threads", std::min<int64_t>(4, std::thread::hardware_concurrency())));
    o.threads = int(std::max<int64_t>(1, threads));
    QS_ASSIGN_OR_RETURN(o.start_timeout_s, args.get_double("start-timeout-s", 300));
    QS_ASSIGN_OR_RETURN(o.stop_timeout_s, args.get_double("stop-timeout-s", 30));
    QS_ASSIGN_OR_RETURN(o.pass_timeout_s, args.get_double("pass-timeout-s", 0));
    QS_ASSIGN_OR_RETURN(o.gpu_hourly_cost, args.get_double("gpu-hourly-cost", 0));
    o.api_key = args.get_or("api-key", "");
    if (!o.api_key.empty()) {
        o.serve_args.push_back("--api-key");
        o.serve_args.push_back(o.api_key);
        // The sweep polls /health without the key (bench/server_process).
        o.serve_args.push_back("--open-health-metrics");
    }
    o.sweep_id = args.get_or("sweep-id", default_sweep_id());
    o.log_dir = args.get_or("log-dir", ledger + ".logs");
    std::error_code ec;
    std::filesystem::create_directories(o.log_dir, ec);
    if (ec) return io_error("cannot create --log-dir '" + o.log_dir + "': " + ec.message());
    o.binary = std::filesystem::read_symlink("/proc/self/exe", ec).string();
    if (ec) return io_error("cannot read /proc/self/exe: " + ec.message());
    return o;
}

void print_summary(const std::vector<bench::LedgerEntry>& entries, double hourly_cost) {
    auto sum = bench::summarize_campaign(entries, "", hourly_cost);
    std::printf("\n== sweep summary (decisions against the first point that passed, %s) ==\n",
                sum.is_ok() && !sum->control.empty() ? sum->control.c_str() : "none");
    for (const auto& x : sum.is_ok() ? sum->experiments : std::vector<bench::ExperimentSummary>{}) {
        std::printf("%-28s %-40s %s\n", x.id.c_str(), x.label.c_str(),
                    x.ok ? x.decision.c_str() : ("FAILED  " + x.reason).c_str());
        for (const auto& l : x.levels)
            std::printf(
                "    %4lld clients: %10.1f tok/s steady  TTFT median %8.1f ms  $/M %s  %s\n",
                (long long)l.clients, l.steady_tps, l.ttft.median_s * 1e3,
                l.usd_per_m > 0 ? fmt::format("{:.4f}", l.usd_per_m).c_str() : "-",
                x.is_control ? "" : l.decision.c_str());
    }
}

}  // namespace

const CommandSpec& campaign_sweep_spec() {
    static const CommandSpec spec = [] {
        const bench::SweepOptions d;
        CommandSpec c;
        c.name = "campaign sweep";
        c.summary = "start `serve` at each point of a knob grid, take it through the gates, append to the ledger";
        c.usage = "campaign sweep --ledger L.jsonl --fixture F.jsonl --model DIR [--grid knob=v1,v2 ...] [options] "
                  "[-- extra serve arguments]";
        c.description =
            "Each point starts this binary's `serve` with the point's knobs, runs the gates (start, functional, "
            "warm-up, measured passes per client count, endurance, stop), appends the outcome to the ledger and "
            "stops the server; at the end each point's outcome and its decision against the first point that "
            "passed. Exit 0: every point passed; 1: some point failed; 130: interrupted. Knobs are the engine "
            "options (qwenserve help serve, group Engine) by their knob names (max_num_seqs=64,128).";
        CliOption grid = valued("grid", "KNOB=V1,V2", "one axis of the grid; the grid is every combination");
        grid.repeatable = true;
        c.groups.push_back(
            {"Sweep",
             {required("ledger", "L.jsonl", "the campaign ledger (appended to)"),
              required("fixture", "F.jsonl", "the requests (bench fixture writes one)"),
              required("model", "DIR|ORG/NAME", "passed to serve"),
              grid,
              valued("grid-file", "G", "more axes, one KNOB=V1,V2 a line"),
              valued("clients", "N[,N...]", "client counts measured at each point", "16"),
              valued("requests", "N", "requests per measured pass (more than the highest client count)",
                     "the fixture's size"),
              valued("warmup-requests", "N", "requests of the warm-up pass (0: none)", "--requests"),
              valued("endurance-requests", "N", "requests of the endurance pass (0: none)",
                     std::to_string(d.endurance_requests)),
              flag("screen", "screen the measured passes' outputs too (blank, loops, malformed)"),
              valued("port", "N", "the servers' port (0: a free loopback port per point)", std::to_string(d.port)),
              valued("sweep-id", "ID", "names the sweep in the ledger", "sweep-<UTC time>"),
              valued("log-dir", "D", "the servers' logs", "<ledger>.logs"),
              valued("start-timeout-s", "S", "a server not healthy after this long fails its point",
                     fmt::format("{}", d.start_timeout_s)),
              valued("stop-timeout-s", "S", "SIGTERM, then SIGKILL after this long", fmt::format("{}", d.stop_timeout_s)),
              valued("pass-timeout-s", "S", "abandon a pass after this long (0: no limit)",
                     fmt::format("{}", d.pass_timeout_s)),
              valued("gpu-hourly-cost", "USD", "price of the GPU per hour, for $ per million tokens (0: none)",
                     fmt::format("{}", d.gpu_hourly_cost)),
              valued("threads", "N", "I/O threads of the load generator", "min(4, cores)"),
              valued("api-key", "KEY", "passed to serve and sent by the load generator", "none")}});
        return c;
    }();
    return spec;
}

int run_campaign_sweep(int argc, char** argv) {
    // --help before anything else: "--" and --grid are taken out below.
    if (wants_help(campaign_sweep_spec(), argc, argv)) {
        const std::string help = format_help(campaign_sweep_spec());
        std::fwrite(help.data(), 1, help.size(), stdout);
        return 0;
    }
    auto split = split_args(argc, argv);
    if (!split.is_ok()) return fail(kCmd, split.status());
    int code = 0;
    auto args = parse_command(campaign_sweep_spec(), int(split->rest.size()), split->rest.data(), code);
    if (!args) return code;
    bench::Grid grid;
    std::vector<bench::FixtureRequest> fixture;
    std::string ledger;
    auto o = resolve(*args, *split, grid, fixture, ledger);
    if (!o.is_ok()) return fail(kCmd, o.status());
    {  // fail now, not after the first point, if the ledger cannot be written
        std::FILE* f = std::fopen(ledger.c_str(), "a");
        if (!f) return fail(kCmd, io_error("cannot open ledger '" + ledger + "' for appending"));
        std::fclose(f);
    }

    const std::vector<bench::GridPoint> points = bench::expand_grid(grid);
    std::printf("campaign sweep %s: %zu points x %zu client counts, ledger %s, logs in %s\n",
                o->sweep_id.c_str(), points.size(), o->clients.size(), ledger.c_str(),
                o->log_dir.c_str());
    bench::install_interrupt_handlers();
    std::vector<bench::PointOutcome> outcomes;
    std::vector<bench::LedgerEntry> entries;
    for (size_t i = 0; i < points.size() && !bench::interrupted(); ++i) {
        std::printf("\n[%zu/%zu] ", i + 1, points.size());
        bench::PointOutcome out = bench::run_point(*o, points[i], int(i + 1), fixture, stdout);
        for (const auto& e : bench::ledger_entries(out, *o)) {
            Status s = bench::append_ledger(ledger, e);
            if (!s.is_ok()) return fail(kCmd, s);
            entries.push_back(e);
        }
        outcomes.push_back(std::move(out));
    }
    print_summary(entries, o->gpu_hourly_cost);
    if (bench::interrupted()) {
        std::printf("interrupted: %zu of %zu points not run\n", points.size() - outcomes.size(),
                    points.size());
        return 130;
    }
    for (const auto& out : outcomes)
        if (!out.ok) return 1;
    return 0;
}

}  // namespace qs::cli

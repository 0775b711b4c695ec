// `qwenserve bench`: the load generator and its fixtures, on the main thread (the load generator
// runs its own I/O threads while a pass lasts).
//   bench fixture --out F.jsonl --requests N --seed S [--min-prompt 200 --max-prompt 1800
//                 --max-tokens 256 --context 2048 --distribution uniform|normal --token-ids
//                 --model NAME --no-ignore-eos]
//   bench --url URL --fixture F.jsonl --clients C --requests N [--passes P --threads T
//         --gpu-hourly-cost USD --api-key K --json-out R.json --pass-timeout-s S]
// Each pass replays N requests with C clients kept busy; every pass gets a table; with several
// passes the first is the warm-up and the last one is the result (all are in the JSON).
#include <cstdio>
#include <fstream>
#include <thread>

#include <fmt/format.h>

#include "bench/fixtures.h"
#include "bench/loadgen.h"
#include "bench/report.h"
#include "cli/commands.h"
#include "core/args.h"
#include "core/fd_limit.h"

namespace qs::cli {

namespace {

int run_fixture(int argc, char** argv) {
    int code = 0;
    auto args = parse_command(bench_fixture_spec(), argc, argv, code);
    if (!args) return code;
    bench::FixtureOptions o;
    auto out = args->require("out");
    if (!out.is_ok()) return fail("bench fixture", out.status());
    auto get = [&](const char* name, int64_t& v) -> Status {
        auto r = args->get_int(name, v);
        if (!r.is_ok()) return r.status();
        v = *r;
        return Status::ok();
    };
    int64_t seed = 0;
    for (auto [name, ptr] : {std::pair{"requests", &o.num_requests},
                             {"seed", &seed},
                             {"min-prompt", &o.min_prompt},
                             {"max-prompt", &o.max_prompt},
                             {"max-tokens", &o.max_tokens},
                             {"context", &o.context_len}}) {
        Status s = get(name, *ptr);
        if (!s.is_ok()) return fail("bench fixture", s);
    }
    o.seed = uint64_t(seed);
    o.distribution = args->get_or("distribution", o.distribution);
    o.model = args->get_or("model", o.model);
    o.token_ids = args->has("token-ids");
    // The output screen's loop rule is meant for completions that may stop by themselves.
    o.ignore_eos = !args->has("no-ignore-eos");
    auto reqs = bench::generate_fixture(o);
    if (!reqs.is_ok()) return fail("bench fixture", reqs.status());
    Status s = bench::write_fixture(*out, *reqs);
    if (!s.is_ok()) return fail("bench fixture", s);
    std::fprintf(stderr, "wrote %zu requests to %s\n", reqs->size(), out->c_str());
    return 0;
}

}  // namespace

const CommandSpec& bench_fixture_spec() {
    static const CommandSpec spec = [] {
        const bench::FixtureOptions d;
        CommandSpec c;
        c.name = "bench fixture";
        c.summary = "write a seeded JSONL workload (prompt lengths from a distribution) for bench and sweeps";
        c.usage = "bench fixture --out F.jsonl [options]";
        c.groups.push_back(
            {"Fixture",
             {required("out", "F.jsonl", "where the requests go"),
              valued("requests", "N", "requests to write", std::to_string(d.num_requests)),
              valued("seed", "N", "same options and seed, same bytes", std::to_string(d.seed)),
              valued("min-prompt", "N", "shortest prompt in tokens (text prompts need > 6)", std::to_string(d.min_prompt)),
              valued("max-prompt", "N", "longest prompt in tokens", std::to_string(d.max_prompt)),
              valued("max-tokens", "N", "completion limit of each request", std::to_string(d.max_tokens)),
              valued("context", "N", "prompt + max_tokens + template overhead stays within this (max_tokens is "
                                     "lowered to fit)", std::to_string(d.context_len)),
              choice("distribution", {"uniform", "normal"},
                     "prompt lengths; normal: mean mid-range, sd range/6, clipped", d.distribution),
              valued("model", "NAME", "the requests' \"model\" field", d.model),
              flag("token-ids", "/v1/completions with the prompt as token ids (exact lengths) instead of chat text"),
              flag("no-ignore-eos", "let completions stop at end-of-sequence (default: ignore_eos, fixed lengths)")}});
        return c;
    }();
    return spec;
}

const CommandSpec& bench_spec() {
    static const CommandSpec spec = [] {
        CommandSpec c;
        c.name = "bench";
        c.summary = "load generator (closed-loop streaming replay of a fixture) and `bench fixture`";
        c.usage = "bench --url URL --fixture F.jsonl [options]\n       qwenserve bench fixture --out F.jsonl [options]";
        c.description =
            "Each pass replays --requests requests of the fixture with --clients clients kept busy and prints "
            "a table (TTFT, TPOT, ITL, end-to-end latency, throughput, steady state); with several passes the "
            "first is the warm-up and the last one is the result. docs/BENCH.md explains every number.";
        c.subcommands = {"bench fixture"};
        c.groups.push_back(
            {"Load",
             {required("url", "URL", "the server, e.g. http://127.0.0.1:8000"),
              required("fixture", "F.jsonl", "the requests (bench fixture writes one)"),
              valued("clients", "N", "concurrent streaming clients", "64"),
              valued("requests", "N", "requests per pass", "the fixture's size"),
              valued("passes", "N", "passes; all but the last are warm-ups", "1"),
              valued("threads", "N", "I/O threads of the load generator", "min(4, cores)"),
              valued("gpu-hourly-cost", "USD", "price of the GPU per hour, for $ per million tokens (0: none)", "0"),
              valued("api-key", "KEY", "sent as 'Authorization: Bearer KEY'", "none"),
              valued("json-out", "R.json", "every pass's summary as JSON (campaign record reads it)"),
              valued("pass-timeout-s", "S", "abandon a pass after this long (0: no limit)", "0")}});
        return c;
    }();
    return spec;
}

int run_bench(int argc, char** argv) {
    if (argc >= 1 && std::string(argv[0]) == "fixture") return run_fixture(argc - 1, argv + 1);
    int code = 0;
    auto args = parse_command(bench_spec(), argc, argv, code);
    if (!args) return code;
    auto url_s = args->require("url");
    if (!url_s.is_ok()) return fail("bench", url_s.status());
    auto fixture_path = args->require("fixture");
    if (!fixture_path.is_ok()) return fail("bench", fixture_path.status());
    auto url = bench::parse_url(*url_s);
    if (!url.is_ok()) return fail("bench", url.status());
    auto fixture = bench::read_fixture(*fixture_path);
    if (!fixture.is_ok()) return fail("bench", fixture.status());

    bench::LoadgenOptions o;
    o.url = *url;
    o.api_key = args->get_or("api-key", "");
    auto clients = args->get_int("clients", 64);
    auto requests = args->get_int("requests", int64_t(fixture->size()));
    auto passes = args->get_int("passes", 1);
    auto threads =
        args->get_int("threads", std::min<int64_t>(4, std::thread::hardware_concurrency()));
    auto cost = args->get_double("gpu-hourly-cost", 0.0);
    auto timeout = args->get_double("pass-timeout-s", 0.0);
    for (const Status* s : {&clients.status(), &requests.status(), &passes.status(),
                            &threads.status(), &cost.status(), &timeout.status()})
        if (!s->is_ok()) return fail("bench", *s);
    if (*passes <= 0) return fail("bench", invalid_argument("--passes must be positive"));
    o.clients = *clients;
    o.requests = *requests;
    o.threads = int(std::max<int64_t>(1, *threads));
    o.pass_timeout_s = *timeout;
    raise_fd_limit();

    nlohmann::json out = {{"url", *url_s},
                          {"fixture", *fixture_path},
                          {"clients", o.clients},
                          {"requests", o.requests},
                          {"threads", o.threads},
                          {"gpu_hourly_cost", *cost},
                          {"passes", nlohmann::json::array()}};
    for (int64_t p = 0; p < *passes; ++p) {
        auto pass = bench::run_pass(o, *fixture);
        if (!pass.is_ok()) return fail("bench", pass.status());
        bench::Summary s = bench::summarize(pass->records, o.clients);
        std::string title = *passes > 1 && p + 1 < *passes ? fmt::format("Pass {} (warm-up)", p + 1)
                                                           : fmt::format("Pass {}", p + 1);
        std::fputs(bench::format_table(s, *cost, title).c_str(), stdout);
        std::fflush(stdout);
        out["passes"].push_back(bench::summary_json(s, *cost));
    }
    out["result"] = out["passes"].back();
    if (auto path = args->get("json-out")) {
        std::ofstream f(*path, std::ios::trunc);
        f << out.dump(2) << '\n';
        if (!f) return fail("bench", io_error("cannot write '" + *path + "'"));
    }
    return 0;
}

}  // namespace qs::cli

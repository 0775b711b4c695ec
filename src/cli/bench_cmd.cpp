// `qwenserve bench`: the load generator and its fixtures, on the main thread (the load generator
// runs its own I/O threads while a pass lasts).
//   bench fixture --out F.jsonl --requests N --seed S [--min-prompt 200 --max-prompt 1800
//                 --max-tokens 256 --context 2048 --distribution uniform|normal --token-ids
//                 --model NAME --no-ignore-eos]
//   bench --url URL (--fixture F.jsonl | --sharegpt F.json --tokenizer T) --clients C --requests N
//         [--request-rate R --burstiness B --arrival poisson|constant --seed S --passes P
//         --threads T --gpu-hourly-cost USD --api-key K --json-out R.json --pass-timeout-s S]
// Each pass replays N requests with C clients kept busy (closed loop), or sends them at
// --request-rate arrivals with at most C in flight (open loop); every pass gets a table; with
// several passes the first is the warm-up and the last one is the result (all are in the JSON).

#include <cstdio>
#include <fstream>
#include <thread>

#include <fmt/format.h>

#include "bench/arrivals.h"
#include "bench/fixtures.h"
#include "bench/loadgen.h"
#include "bench/report.h"
#include "bench/sharegpt.h"
#include "cli/commands.h"
#include "core/args.h"
#include "core/fd_limit.h"
#include "tokenizer/tokenizer.h"

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

// The requests of a run: a fixture, or a ShareGPT file measured with the model's tokenizer.
Result<std::vector<bench::FixtureRequest>> load_requests(const Args& args) {
    const auto fixture = args.get("fixture");
    const auto sharegpt = args.get("sharegpt");
    if (fixture.has_value() == sharegpt.has_value())
        return invalid_argument("give exactly one of --fixture F.jsonl and --sharegpt F.json");
    if (fixture) return bench::read_fixture(*fixture);
    const auto tokenizer_path = args.get("tokenizer");
    if (!tokenizer_path)
        return invalid_argument("--sharegpt needs --tokenizer PATH (the served model's tokenizer.json or model directory): "
                                "max_tokens is each answer's length in its tokens");
    auto tokenizer = tok::Tokenizer::from_path(*tokenizer_path);
    if (!tokenizer.is_ok()) return tokenizer.status();
    bench::ShareGptOptions o;
    auto n = args.get_int("requests", o.num_requests);
    if (!n.is_ok()) return n.status();
    auto seed = args.get_int("seed", 0);
    if (!seed.is_ok()) return seed.status();
    o.num_requests = *n;
    o.seed = uint64_t(*seed);
    o.model = args.get_or("model", o.model);
    const tok::Tokenizer& t = **tokenizer;
    return bench::load_sharegpt(*sharegpt, o, [&t](std::string_view text) { return int64_t(t.encode(text).size()); });
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
        c.summary = "load generator (closed-loop or open-loop streaming replay of a fixture or ShareGPT file) and `bench fixture`";
        c.usage = "bench --url URL (--fixture F.jsonl | --sharegpt F.json --tokenizer T) [options]\n"
                  "       qwenserve bench fixture --out F.jsonl [options]";
        c.description =
            "Each pass replays --requests requests with --clients clients kept busy (closed loop) or, with "
            "--request-rate, sends them at random arrival times with at most --clients in flight (open loop), "
            "and prints a table (TTFT, TPOT, ITL, end-to-end latency, throughput, steady state); with several "
            "passes the first is the warm-up and the last one is the result. docs/BENCH.md explains every number.";
        c.subcommands = {"bench fixture"};
        c.groups.push_back(
            {"Requests",
             {valued("fixture", "F.jsonl", "the requests (bench fixture writes one)"),
              valued("sharegpt", "F.json", "a ShareGPT-format dataset instead: first human turn as the prompt, the "
                                           "answer's token length as max_tokens, filtered as vLLM's benchmark"),
              valued("tokenizer", "PATH", "with --sharegpt: tokenizer.json or model directory that measures lengths"),
              valued("model", "NAME", "with --sharegpt: the requests' \"model\" field", "qwen3.6-35b-a3b"),
              valued("seed", "N", "with --sharegpt: shuffles the dataset; with --request-rate: the arrival times", "0")}});
        c.groups.push_back(
            {"Load",
             {required("url", "URL", "the server, e.g. http://127.0.0.1:8000"),
              valued("clients", "N", "concurrent streaming clients (open loop: the most requests in flight)", "64"),
              valued("requests", "N", "requests per pass", "the fixture's size; ShareGPT: 1000"),
              valued("request-rate", "R", "open loop: R requests per second on average (0: closed loop)", "0"),
              choice("arrival", {"poisson", "constant"},
                     "open loop: gamma-distributed gaps (poisson when --burstiness is 1) or a fixed gap of 1/R",
                     "poisson"),
              valued("burstiness", "B", "open loop, poisson: gamma shape of the gaps (< 1 burstier, > 1 steadier)",
                     "1"),
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
    auto url = bench::parse_url(*url_s);
    if (!url.is_ok()) return fail("bench", url.status());
    auto fixture = load_requests(*args);
    if (!fixture.is_ok()) return fail("bench", fixture.status());
    const std::string source = args->get("fixture") ? *args->get("fixture") : *args->get("sharegpt");

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
    auto rate = args->get_double("request-rate", 0.0);
    auto burstiness = args->get_double("burstiness", 1.0);
    auto seed = args->get_int("seed", 0);
    for (const Status* s : {&clients.status(), &requests.status(), &passes.status(), &threads.status(),
                            &cost.status(), &timeout.status(), &rate.status(), &burstiness.status(), &seed.status()})
        if (!s->is_ok()) return fail("bench", *s);
    if (*passes <= 0) return fail("bench", invalid_argument("--passes must be positive"));
    o.clients = *clients;
    o.requests = *requests;
    o.threads = int(std::max<int64_t>(1, *threads));
    o.pass_timeout_s = *timeout;
    bench::ArrivalOptions arrival;
    arrival.rate = *rate;
    arrival.burstiness = *burstiness;
    arrival.process = args->get_or("arrival", arrival.process);
    arrival.seed = uint64_t(*seed);
    if (*rate < 0) return fail("bench", invalid_argument("--request-rate must not be negative (0: closed loop)"));
    if (*rate > 0) {
        auto times = bench::arrival_times(o.requests, arrival);
        if (!times.is_ok()) return fail("bench", times.status());
        o.arrivals = std::move(*times);
    } else if (args->get("burstiness") || args->get("arrival")) {
        return fail("bench", invalid_argument("--burstiness and --arrival need --request-rate (open loop)"));
    }
    raise_fd_limit();

    nlohmann::json out = {{"url", *url_s},
                          {"fixture", source},
                          {"clients", o.clients},
                          {"requests", o.requests},
                          {"threads", o.threads},
                          {"gpu_hourly_cost", *cost},
                          {"passes", nlohmann::json::array()}};
    if (*rate > 0)
        out["open_loop"] = {{"request_rate", arrival.rate}, {"arrival", arrival.process},
                            {"burstiness", arrival.burstiness}, {"seed", arrival.seed}};
    for (int64_t p = 0; p < *passes; ++p) {
        auto pass = bench::run_pass(o, *fixture);
        if (!pass.is_ok()) return fail("bench", pass.status());
        // Open loop offers load from the first arrival on: the steady window starts there.
        bench::Summary s = bench::summarize(pass->records, o.arrivals.empty() ? o.clients : 1);
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

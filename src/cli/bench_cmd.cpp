// `qwenserve bench`: the load generator and its fixtures, on the main thread (the load generator
// runs its own I/O threads while a pass lasts).
//   bench fixture --out F.jsonl --requests N --seed S [--min-prompt 200 --max-prompt 1800
//                 --max-tokens 256 --context 2048 --distribution uniform|normal --token-ids
//                 --model NAME --no-ignore-eos]
//   bench --url URL --fixture F.jsonl --clients C --requests N [--passes P --threads T
//         --gpu-hourly-cost USD --api-key K --json-out R.json --pass-timeout-s S]
// Each pass replays N requests with C clients kept busy; every pass gets a table; with several
// passes the first is the warm-up and the last one is the result (all are in the JSON).
#include <sys/resource.h>

#include <cstdio>
#include <fstream>
#include <thread>

#include <fmt/format.h>

#include "bench/fixtures.h"
#include "bench/loadgen.h"
#include "bench/report.h"
#include "cli/commands.h"
#include "core/args.h"

namespace qs::cli {

namespace {

int run_fixture(int argc, char** argv) {
    auto args = Args::parse(argc, argv, {"token-ids", "no-ignore-eos"},
                            {"out", "requests", "seed", "min-prompt", "max-prompt", "max-tokens",
                             "context", "distribution", "model"});
    if (!args.is_ok()) return fail("bench fixture", args.status());
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

// 1280 sockets need more descriptors than the usual soft limit of 1024.
void raise_fd_limit() {
    rlimit rl{};
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
}

}  // namespace

int run_bench(int argc, char** argv) {
    if (argc >= 1 && std::string(argv[0]) == "fixture") return run_fixture(argc - 1, argv + 1);
    auto args = Args::parse(argc, argv, {},
                            {"url", "fixture", "clients", "requests", "passes", "threads",
                             "gpu-hourly-cost", "api-key", "json-out", "pass-timeout-s"});
    if (!args.is_ok()) return fail("bench", args.status());
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

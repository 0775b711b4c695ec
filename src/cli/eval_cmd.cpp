// `qwenserve eval`: quality evidence against any OpenAI-compatible endpoint (docs/BENCH.md).
//   eval code     --url URL --out R.jsonl [--problems F.jsonl|builtin --model NAME
//                 --concurrency 8 --max-tokens 4096 --temperature 0 --top-p 1 --seed S
//                 --thinking --api-key K --timeout-s S --jobs 2 --threads 1 --prompt-field F
//                 --python /usr/bin/python3 --wall-s 30 --cpu-s 20 --memory-mb 2048
//                 --file-mb 16 --work-dir DIR --no-network-isolation]
//   eval problems --out F.jsonl        writes the built-in problem set (the format's example)
//   eval compare  A.jsonl B.jsonl [--alpha 0.05 --margin M]   (eval_compare_cmd.cpp)
//   eval power    --difference D [--discordance P ...]        (eval_compare_cmd.cpp)
//   eval niah     --url URL --out R.jsonl ...                 (eval_niah_cmd.cpp)
// Option tables: eval_specs.cpp. Main thread (the load generator and the sandbox pool run their
// own threads).
#include <cstdio>
#include <fstream>
#include <map>
#include <thread>

#include <fmt/format.h>

#include "cli/commands.h"
#include "core/args.h"
#include "eval/code_eval.h"
#include "eval/problems.h"
#include "eval/sandbox.h"

namespace qs::cli {

namespace {

int run_problems(int argc, char** argv) {
    constexpr const char* kCmd = "eval problems";
    int code = 0;
    auto args = parse_command(eval_problems_spec(), argc, argv, code);
    if (!args) return code;
    auto out = args->require("out");
    if (!out.is_ok()) return fail(kCmd, out.status());
    std::ofstream f(*out, std::ios::trunc);
    auto problems = eval::builtin_problems();
    for (const auto& p : problems) f << eval::problem_line(p) << '\n';
    if (!f) return fail(kCmd, io_error("cannot write '" + *out + "'"));
    std::fprintf(stderr, "wrote %zu problems to %s\n", problems.size(), out->c_str());
    return 0;
}

int run_code(int argc, char** argv) {
    constexpr const char* kCmd = "eval code";
    int code = 0;
    auto args = parse_command(eval_code_spec(), argc, argv, code);
    if (!args) return code;
    auto url_s = args->require("url");
    if (!url_s.is_ok()) return fail(kCmd, url_s.status());
    auto out = args->require("out");
    if (!out.is_ok()) return fail(kCmd, out.status());
    auto url = bench::parse_url(*url_s);
    if (!url.is_ok()) return fail(kCmd, url.status());

    std::string source = args->get_or("problems", "builtin");
    std::vector<eval::Problem> problems;
    if (source == "builtin") {
        problems = eval::builtin_problems();
    } else {
        auto p = eval::read_problems(source, args->get_or("prompt-field", ""));
        if (!p.is_ok()) return fail(kCmd, p.status());
        problems = std::move(*p);
    }

    eval::CodeEvalOptions o;
    o.url = *url;
    o.api_key = args->get_or("api-key", "");
    o.model = args->get_or("model", o.model);
    o.thinking = args->has("thinking");
    auto concurrency = args->get_int("concurrency", o.concurrency);
    auto max_tokens = args->get_int("max-tokens", o.max_tokens);
    auto temperature = args->get_double("temperature", o.temperature);
    auto top_p = args->get_double("top-p", o.top_p);
    auto seed = args->get_int("seed", o.seed);
    auto timeout = args->get_double("timeout-s", o.timeout_s);
    auto jobs = args->get_int(
        "jobs", std::max<int64_t>(1, int64_t(std::thread::hardware_concurrency()) / 2));
    auto threads = args->get_int("threads", 1);
    auto wall = args->get_double("wall-s", o.exec.limits.wall_s);
    auto cpu = args->get_int("cpu-s", o.exec.limits.cpu_s);
    auto mem = args->get_int("memory-mb", o.exec.limits.memory_bytes >> 20);
    auto file = args->get_int("file-mb", o.exec.limits.file_bytes >> 20);
    for (const Status* s :
         {&concurrency.status(), &max_tokens.status(), &temperature.status(), &top_p.status(),
          &seed.status(), &timeout.status(), &jobs.status(), &threads.status(), &wall.status(),
          &cpu.status(), &mem.status(), &file.status()})
        if (!s->is_ok()) return fail(kCmd, *s);
    if (*concurrency < 1 || *max_tokens < 1 || *jobs < 1 || *threads < 1 || *wall <= 0 ||
        *cpu < 1 || *mem < 64 || *file < 1)
        return fail(kCmd, invalid_argument("--concurrency, --max-tokens, --jobs, --threads, "
                                           "--wall-s, --cpu-s (>= 1), --memory-mb (>= 64) and "
                                           "--file-mb (>= 1) must be positive"));
    o.concurrency = *concurrency;
    o.max_tokens = *max_tokens;
    o.temperature = *temperature;
    o.top_p = *top_p;
    o.seed = *seed;
    o.timeout_s = *timeout;
    o.jobs = int(*jobs);
    o.threads = int(*threads);
    o.exec.python = args->get_or("python", o.exec.python);
    o.exec.work_root = args->get_or("work-dir", "");
    o.exec.limits.wall_s = *wall;
    o.exec.limits.cpu_s = *cpu;
    o.exec.limits.memory_bytes = *mem << 20;
    o.exec.limits.file_bytes = *file << 20;
    o.exec.limits.isolate_network = !args->has("no-network-isolation");
    if (o.exec.python.empty() || o.exec.python[0] != '/')
        return fail(kCmd, invalid_argument("--python must be an absolute path"));
    if (o.exec.limits.isolate_network) {
        Status s = eval::check_sandbox_available();
        if (!s.is_ok())
            return fail(kCmd, s.with_context("the sandbox needs network and PID namespaces "
                                             "(pass --no-network-isolation to run without)"));
    }

    auto results = eval::run_code_eval(problems, o);
    if (!results.is_ok()) return fail(kCmd, results.status());
    Status w = eval::write_results(*out, *results);
    if (!w.is_ok()) return fail(kCmd, w);

    std::map<std::string, int64_t> classes;
    int64_t passed = 0, completion = 0, reasoning = 0;
    for (const auto& r : *results) {
        ++classes[r.error_class];
        passed += r.passed ? 1 : 0;
        completion += r.completion_tokens;
        reasoning += r.reasoning_tokens;
    }
    std::printf("%s: %lld / %zu passed (%.1f%%); %lld completion tokens, %lld reasoning\n",
                source.c_str(), (long long)passed, results->size(),
                100.0 * double(passed) / double(results->size()), (long long)completion,
                (long long)reasoning);
    for (const auto& [k, v] : classes) std::printf("  %-32s %lld\n", k.c_str(), (long long)v);
    std::fprintf(stderr, "results -> %s\n", out->c_str());
    return 0;
}

}  // namespace

int run_eval(int argc, char** argv) {
    std::string sub = argc >= 1 ? argv[0] : "";
    if (sub == "--help" || sub == "-h") {
        const std::string help = format_help(eval_spec());
        std::fwrite(help.data(), 1, help.size(), stdout);
        return 0;
    }
    if (sub == "code") return run_code(argc - 1, argv + 1);
    if (sub == "problems") return run_problems(argc - 1, argv + 1);
    if (sub == "compare") return run_eval_compare(argc - 1, argv + 1);
    if (sub == "power") return run_eval_power(argc - 1, argv + 1);
    if (sub == "niah") return run_eval_niah(argc - 1, argv + 1);
    return fail("eval",
                invalid_argument("expected 'eval code', 'problems', 'compare', 'power' or 'niah'"));
}

}  // namespace qs::cli

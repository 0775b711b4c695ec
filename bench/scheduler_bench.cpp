// Engine bookkeeping cost: everything a step costs except the model forward, with N resident
// sequences decoding, at the real Qwen3.6-35B-A3B shapes (vocabulary 248,320, real cache
// geometry) on NullOps (no arithmetic, no cache storage). Reports per step: scheduling, the whole
// step minus the forward, and the sampling call (building the SampleRows and NullOps::sample,
// which draws nothing: the draws themselves run on the backend) separately, for each sampling
// mode. A benchmark, never a test; single-threaded.
// Usage: build/bench/scheduler_bench [--steps 20] [--prompt 512] [--residents 64,256,512]
//            [--spec 0,2] [--prefix on,off] [--modes greedy,sampled,penalties,logprobs] [--vocab V]
// --residents/--spec/--prefix/--modes pick scenarios; --vocab changes the vocabulary.
#include <algorithm>
#include <cstdio>
#include <random>
#include <string>

#include "backend/null/null_ops.h"
#include "core/args.h"
#include "core/timer.h"
#include "engine/engine.h"
#include "model/weights.h"

using namespace qs;

namespace {

struct Scenario {
    int64_t residents;
    bool prefix_caching;
    int64_t spec;
    std::string mode;  // greedy | sampled (T 0.7, top_p 0.95) | penalties (T 1 + all three) | logprobs (5)
};

void apply_mode(const std::string& mode, SamplingParams& p) {
    p.temperature = 0.0;
    if (mode == "sampled") {
        p.temperature = 0.7;
        p.top_p = 0.95;
    } else if (mode == "penalties") {
        p.temperature = 1.0;
        p.repetition_penalty = 1.1;
        p.presence_penalty = 0.5;
        p.frequency_penalty = 0.5;
    } else if (mode == "logprobs") {
        p.logprobs = 5;
    }
}

struct Measured {
    double schedule_ms, step_minus_forward_ms, sample_ms, bookkeeping_ms, forward_ms;
};

Measured run_scenario(const ModelWeights& w, const Scenario& sc, int64_t prompt_len, int64_t steps) {
    NullOps ops;
    EngineConfig ec;
    ec.max_num_seqs = sc.residents;
    ec.enable_prefix_caching = sc.prefix_caching;
    ec.num_speculative_tokens = sc.spec;
    ec.cache_memory_mb = 1 << 20;  // capacity arithmetic only: NullOps allocates no cache storage
    const int64_t max_tokens = (steps + 64) * (1 + sc.spec);
    ec.num_kv_blocks = sc.residents * ((prompt_len + max_tokens) / ec.kv_block_size + 2) + 1024;
    ec.max_model_len = prompt_len + max_tokens + 16;
    auto engine = Engine::create(w, ops, ec, nullptr);
    if (!engine.is_ok()) {
        std::fprintf(stderr, "engine: %s\n", engine.status().message().c_str());
        std::exit(1);
    }
    Engine& e = **engine;
    // Prompts share a 256-token system prefix (prefix-cache hits when enabled).
    std::mt19937 rng(1);
    const uint32_t max_id = uint32_t(std::min<int64_t>(150000, w.config.vocab_size));
    std::vector<int32_t> system(256);
    for (auto& t : system) t = int32_t(rng() % max_id);
    for (int64_t i = 0; i < sc.residents; ++i) {
        GenerationRequest r;
        r.id = "r" + std::to_string(i);
        r.prompt_ids = system;
        while (int64_t(r.prompt_ids.size()) < prompt_len) r.prompt_ids.push_back(int32_t(rng() % max_id));
        apply_mode(sc.mode, r.params);
        r.params.seed = uint64_t(i);
        r.params.max_tokens = max_tokens;
        r.params.ignore_eos = true;
        if (!e.submit(std::move(r), [](RequestOutput&&) {}).is_ok()) std::exit(1);
    }
    // Prefill everything, then a few decode steps to settle (MTP drafts in place).
    while (e.stats().num_waiting > 0 || e.stats().num_running < sc.residents) e.step();
    for (int i = 0; i < 8; ++i) e.step();
    e.reset_profile();
    for (int64_t i = 0; i < steps; ++i) e.step();
    const EngineProfile& p = e.profile();
    const double n = double(p.steps);
    Measured m;
    m.schedule_ms = p.schedule_s / n * 1e3;
    m.forward_ms = p.forward_s / n * 1e3;
    m.step_minus_forward_ms = (p.total_s - p.forward_s) / n * 1e3;
    m.sample_ms = p.sample_s / n * 1e3;
    m.bookkeeping_ms = (p.total_s - p.forward_s - p.sample_s) / n * 1e3;
    if (e.stats().num_running != sc.residents) std::fprintf(stderr, "warning: sequences finished early\n");
    return m;
}

}  // namespace

int main(int argc, char** argv) {
    auto args = Args::parse(argc, argv, {}, {"steps", "prompt", "residents", "spec", "prefix", "modes", "vocab"});
    if (!args.is_ok()) {
        std::fprintf(stderr, "%s\n", args.status().message().c_str());
        return 2;
    }
    const int64_t steps = args->get_int("steps", 20).value();
    const int64_t prompt_len = args->get_int("prompt", 512).value();
    auto residents_list = parse_int_list(args->get_or("residents", "64,256,512"), "--residents");
    auto spec_list = parse_int_list(args->get_or("spec", "0,2"), "--spec");
    if (!residents_list.is_ok() || !spec_list.is_ok()) {
        std::fprintf(stderr, "bad --residents or --spec\n");
        return 2;
    }
    const std::string prefix = args->get_or("prefix", "on,off");
    std::vector<std::string> modes;
    {
        const std::string list = args->get_or("modes", "greedy");
        for (size_t at = 0; at <= list.size();) {
            const size_t comma = std::min(list.find(',', at), list.size());
            const std::string m = list.substr(at, comma - at);
            if (m != "greedy" && m != "sampled" && m != "penalties" && m != "logprobs") {
                std::fprintf(stderr, "--modes: unknown mode '%s' (greedy, sampled, penalties, logprobs)\n", m.c_str());
                return 2;
            }
            modes.push_back(m);
            at = comma + 1;
        }
    }
    ModelConfig config = qwen36_35b_a3b_config();
    config.vocab_size = args->get_int("vocab", config.vocab_size).value();
    const ModelWeights w = make_shape_only_weights(config, /*with_mtp=*/true);

    std::printf("Engine step cost without the forward: qwen36-35b-a3b shapes (vocab %lld), NullOps,\n"
                "prompt %lld tokens (256 shared), %lld measured decode steps; ms per step.\n"
                "sampling = building the SampleRows + the backend call (NullOps draws nothing);\n"
                "bookkeeping = step - forward - sampling\n\n",
                (long long)config.vocab_size, (long long)prompt_len, (long long)steps);
    std::printf("| resident | prefix cache | MTP k | mode | schedule | step - forward | sampling | bookkeeping |\n");
    std::printf("|---------:|:------------:|------:|:-----|---------:|---------------:|---------:|------------:|\n");
    // Plain decode with the prefix cache on and off; MTP (k > 0) with it on.
    std::vector<Scenario> scenarios;
    for (int64_t residents : *residents_list)
        for (int64_t spec : *spec_list)
            for (bool on : {true, false}) {
                if (prefix.find(on ? "on" : "off") == std::string::npos || (spec > 0 && !on)) continue;
                for (const std::string& mode : modes) scenarios.push_back({residents, on, spec, mode});
            }
    for (const Scenario& sc : scenarios) {
        const Measured m = run_scenario(w, sc, prompt_len, steps);
        std::printf("| %8lld | %12s | %5lld | %s | %8.3f | %14.3f | %8.3f | %11.3f |\n", (long long)sc.residents,
                    sc.prefix_caching ? "on" : "off", (long long)sc.spec, sc.mode.c_str(), m.schedule_ms,
                    m.step_minus_forward_ms, m.sample_ms, m.bookkeeping_ms);
        std::fflush(stdout);
    }

    return 0;
}

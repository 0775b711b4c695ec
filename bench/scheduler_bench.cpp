// Engine bookkeeping cost: everything a step costs except the model forward, with N resident
// sequences decoding, at the real Qwen3.6-35B-A3B shapes (vocabulary 248,320, real cache
// geometry) on NullOps (no arithmetic, no cache storage). Reports per step: scheduling, the whole
// step minus the forward, and the CPU sampling over the vocabulary separately; then the per-row
// cost of each sampling mode. A benchmark, never a test; single-threaded.
// Usage: build/bench/scheduler_bench [--steps 20] [--prompt 512] [--residents 64,256,512]
//            [--spec 0,2] [--prefix on,off] [--no-modes] [--vocab V]
// --residents/--spec/--prefix pick scenarios (default: all nine); --no-modes skips the
// per-row sampling table; --vocab shrinks the vocabulary (profiling the bookkeeping under
// callgrind: its instruction count does not depend on the vocabulary, its time partly does,
// through the cache traffic of the host logits).
#include <algorithm>
#include <cstdio>
#include <random>
#include <string>

#include "backend/null/null_ops.h"
#include "core/args.h"
#include "core/timer.h"
#include "engine/engine.h"
#include "engine/sampler.h"

using namespace qs;

namespace {

struct Scenario {
    int64_t residents;
    bool prefix_caching;
    int64_t spec;
};

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
        r.params.temperature = 0.0;
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

// Milliseconds per logits row for one sampling mode over random logits of the real vocabulary.
double sample_row_ms(int64_t V, const SamplingParams& p, int rows) {
    std::mt19937 rng(2);
    std::normal_distribution<float> nd(0.0f, 2.0f);
    std::vector<float> logits(static_cast<size_t>(V));
    for (float& x : logits) x = nd(rng);
    SamplerState s(p, {1, 2, 3}, 0);
    Timer t;
    int64_t sink = 0;
    for (int i = 0; i < rows; ++i) sink += pick_token(logits.data(), V, p, s);
    const double ms = t.elapsed_s() / rows * 1e3;
    if (sink < 0) std::printf("%lld", (long long)sink);
    return ms;
}

}  // namespace

int main(int argc, char** argv) {
    auto args = Args::parse(argc, argv, {"no-modes"}, {"steps", "prompt", "residents", "spec", "prefix", "vocab"});
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
    ModelConfig config = qwen36_35b_a3b_config();
    config.vocab_size = args->get_int("vocab", config.vocab_size).value();
    const ModelWeights w = make_shape_only_weights(config, /*with_mtp=*/true);

    std::printf("Engine step cost without the forward: qwen36-35b-a3b shapes (vocab %lld), NullOps, greedy,\n"
                "prompt %lld tokens (256 shared), %lld measured decode steps; ms per step.\n"
                "bookkeeping = step - forward - sampling (sampling = argmax/verify over the vocabulary on CPU)\n\n",
                (long long)config.vocab_size, (long long)prompt_len, (long long)steps);
    std::printf("| resident | prefix cache | MTP k | schedule | step - forward | sampling | bookkeeping |\n");
    std::printf("|---------:|:------------:|------:|---------:|---------------:|---------:|------------:|\n");
    // Plain decode with the prefix cache on and off; MTP (k > 0) with it on.
    std::vector<Scenario> scenarios;
    for (int64_t residents : *residents_list)
        for (int64_t spec : *spec_list)
            for (bool on : {true, false}) {
                if (prefix.find(on ? "on" : "off") == std::string::npos || (spec > 0 && !on)) continue;
                scenarios.push_back({residents, on, spec});
            }
    for (const Scenario& sc : scenarios) {
        const Measured m = run_scenario(w, sc, prompt_len, steps);
        std::printf("| %8lld | %12s | %5lld | %8.3f | %14.3f | %8.3f | %11.3f |\n", (long long)sc.residents,
                    sc.prefix_caching ? "on" : "off", (long long)sc.spec, m.schedule_ms, m.step_minus_forward_ms,
                    m.sample_ms, m.bookkeeping_ms);
        std::fflush(stdout);
    }

    if (args->has("no-modes")) return 0;
    std::printf("\nCPU sampling per logits row (vocab %lld, random logits):\n\n", (long long)config.vocab_size);
    std::printf("| mode | ms per row | ms per step at 512 rows |\n|:-----|-----------:|------------------------:|\n");
    struct Mode {
        const char* name;
        SamplingParams p;
    };
    std::vector<Mode> modes(5);
    modes[0] = {"greedy", {}};
    modes[0].p.temperature = 0.0;
    modes[1] = {"temperature 0.7", {}};
    modes[1].p.temperature = 0.7;
    modes[2] = {"top-k 50", {}};
    modes[2].p.top_k = 50;
    modes[3] = {"top-p 0.9", {}};
    modes[3].p.top_p = 0.9;
    modes[4] = {"top-p 0.9 + repetition 1.1", {}};
    modes[4].p.top_p = 0.9;
    modes[4].p.repetition_penalty = 1.1;
    for (Mode& m : modes) {
        m.p.seed = 1;
        const double ms = sample_row_ms(config.vocab_size, m.p, m.p.temperature == 0.0 ? 200 : 20);
        std::printf("| %s | %.3f | %.1f |\n", m.name, ms, ms * 512);
    }
    return 0;
}

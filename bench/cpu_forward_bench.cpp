// CPU backend speed: prefill and decode tokens/s of the reference forward on dummy weights, for
// the tiny test config and a mid-size config. Prints a table (a benchmark, never a test).
// Usage: build/bench/cpu_forward_bench [--prompt 256] [--decode 32]
#include <omp.h>

#include <cstdio>
#include <random>
#include <string>

#include "backend/cpu/cpu_ops.h"
#include "core/args.h"
#include "core/timer.h"
#include "model/single_sequence.h"

using namespace qs;

namespace {

ModelConfig mid_config() {
    ModelConfig c = qwen36_35b_a3b_config();
    c.hidden_size = 1024;
    c.num_hidden_layers = 8;
    c.layer_types.resize(8);
    c.num_attention_heads = 8;
    c.num_key_value_heads = 2;
    c.head_dim = 128;
    c.linear_num_key_heads = 8;
    c.linear_num_value_heads = 16;
    c.linear_key_head_dim = 64;
    c.linear_value_head_dim = 64;
    c.num_experts = 64;
    c.num_experts_per_tok = 8;
    c.moe_intermediate_size = 256;
    c.shared_expert_intermediate_size = 256;
    c.vocab_size = 32768;
    c.mrope_section = {6, 5, 5};
    return c;
}

struct Row {
    std::string name;
    double params_m, prefill_tps, decode_tps;
};

Row measure(const std::string& name, const ModelConfig& c, int prompt, int decode) {
    ModelWeights w = make_dummy_weights(c, 1, /*with_mtp=*/false);
    CpuOps ops;
    Qwen36Model model(w, ops);
    std::mt19937 rng(1);
    std::vector<int32_t> ids(static_cast<size_t>(prompt));
    for (auto& id : ids) id = int32_t(rng() % uint32_t(c.vocab_size));
    SingleSequence seq(model, prompt + decode);
    Timer tp;
    std::vector<float> logits = seq.feed(ids, false);
    const double prefill_s = tp.elapsed_s();
    Timer td;
    for (int i = 0; i < decode; ++i) logits = seq.feed({int32_t(i % c.vocab_size)}, false);
    const double decode_s = td.elapsed_s();
    return {name, double(w.storage_bytes()) / 2e6, prompt / prefill_s, decode / decode_s};
}

}  // namespace

int main(int argc, char** argv) {
    auto args = Args::parse(argc - 1, argv + 1, {}, {"prompt", "decode"});
    if (!args.is_ok()) {
        std::fprintf(stderr, "%s\n", args.status().message().c_str());
        return 2;
    }
    const int prompt = int(args->get_int("prompt", 256).value());
    const int decode = int(args->get_int("decode", 32).value());
    std::vector<Row> rows = {measure("tiny (spec 1.4)", tiny_model_config(), prompt, decode),
                             measure("mid (H1024, 8L, 64e top8)", mid_config(), prompt, decode)};
    std::printf("CPU backend, %d threads, prompt %d tokens, %d decode steps (batch 1)\n", omp_get_max_threads(),
                prompt, decode);
    std::printf("| model | params (M) | prefill tok/s | decode tok/s |\n|---|---|---|---|\n");
    for (const Row& r : rows)
        std::printf("| %s | %.1f | %.1f | %.1f |\n", r.name.c_str(), r.params_m, r.prefill_tps, r.decode_tps);
    return 0;
}

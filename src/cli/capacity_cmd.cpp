// `qwenserve capacity --model DIR|builtin:NAME [engine knobs]`: what a cache budget holds, with
// the arithmetic the engine uses (GPU storage sizes: bf16/fp8 KV pages, bf16 conv windows, fp32
// recurrent states), and max_num_seqs, when not given, lowered as serve lowers it
// (EngineConfig::fitted). Needs only the config, not the weights.
#include <cstdio>

#include "cli/commands.h"
#include "cli/model_args.h"
#include "engine/engine_config.h"

namespace qs::cli {

namespace {

Status run(const Args& args) {
    QS_ASSIGN_OR_RETURN(std::string model, args.require("model"));
    ModelConfig config;
    if (model == "builtin:qwen36-35b-a3b") {
        config = qwen36_35b_a3b_config();
    } else if (model == "builtin:tiny") {
        config = tiny_model_config();
    } else {
        QS_ASSIGN_OR_RETURN(config, load_model_config(model));
    }
    const bool mtp = config.mtp_num_hidden_layers > 0 && !args.has("no-mtp");
    QS_ASSIGN_OR_RETURN(EngineConfig parsed, EngineConfig::from_args(args));
    const EngineConfig ec = parsed.fitted(config, mtp);  // the max_num_seqs serve would run with
    QS_ASSIGN_OR_RETURN(CapacityPlan p, plan_capacity(config, ec, mtp));
    std::printf("%s\n", p.describe().c_str());
    std::printf("| budget MB | KV B/token | KV pages | KV tokens | state MB/seq | resident seqs | max_model_len |\n");
    std::printf("|---|---|---|---|---|---|---|\n");
    std::printf("| %lld | %zu | %lld | %lld | %.2f | %lld | %lld |\n", (long long)ec.cache_memory_mb, p.kv_bytes_per_token,
                (long long)p.num_kv_blocks, (long long)p.kv_capacity_tokens, double(p.state_bytes_per_slot) / 1e6,
                (long long)p.num_running_slots, (long long)p.max_model_len);
    return Status::ok();
}

}  // namespace

int run_capacity(int argc, char** argv) {
    std::set<std::string> valued = EngineConfig::valued_options();
    valued.insert("model");
    std::set<std::string> flags = EngineConfig::flag_options();
    flags.insert("no-mtp");
    auto args = Args::parse(argc, argv, flags, valued);
    if (!args.is_ok()) return fail("capacity", args.status());
    Status st = run(*args);
    return st.is_ok() ? 0 : fail("capacity", st);
}

}  // namespace qs::cli

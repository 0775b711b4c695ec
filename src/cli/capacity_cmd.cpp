// `qwenserve capacity --model DIR|builtin:NAME [engine knobs]`: what a cache budget holds, with
// the arithmetic the engine uses (GPU storage sizes: bf16/fp8 KV pages, bf16 conv windows, fp32
// recurrent states), and max_num_seqs, when not given, lowered as serve lowers it
// (EngineConfig::fitted). Needs only the config, not the weights.
#include <cstdio>

#include "cli/commands.h"
#include "cli/engine_option_group.h"
#include "cli/model_args.h"
#include "engine/engine_config.h"

namespace qs::cli {

namespace {

Status run(const Args& args) {
    QS_ASSIGN_OR_RETURN(std::string model, model_path_from_args(args));
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

const CommandSpec& capacity_spec() {
    static const CommandSpec spec = [] {
        CommandSpec c;
        c.name = "capacity";
        c.summary = "KV pages, state slots and max_model_len that a cache budget holds";
        c.usage = "capacity --model DIR|builtin:NAME [engine options]";
        c.description = "Reads only the model's config. The budget is --cache-memory-mb; max_num_seqs, when not "
                        "given, is lowered as serve lowers it.";
        c.groups.push_back({"Model", {model_option(), flag("no-mtp", "size without the MTP head's cache")}});
        c.groups.push_back(engine_option_group());
        return c;
    }();
    return spec;
}

int run_capacity(int argc, char** argv) {
    int code = 0;
    auto args = parse_command(capacity_spec(), argc, argv, code);
    if (!args) return code;
    Status st = run(*args);
    return st.is_ok() ? 0 : fail("capacity", st);
}

}  // namespace qs::cli

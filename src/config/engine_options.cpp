// The engine's option table and its checks (see engine_options.h).
#include "config/engine_options.h"

#include <fmt/format.h>

#include <cmath>

#include "core/check.h"

namespace qs {

namespace {

EngineOption option(std::string_view name, std::string_view knob, OptionKind kind, std::string_view help) {
    EngineOption o;
    o.name = name;
    o.knob = knob;
    o.kind = kind;
    o.help = help;
    return o;
}

EngineOption int_option(std::string_view name, std::string_view knob, double min, double max, std::string_view help) {
    EngineOption o = option(name, knob, OptionKind::kInt, help);
    o.min = min;
    o.max = max;
    return o;
}

constexpr double kNoMax = std::numeric_limits<double>::infinity();

std::vector<EngineOption> make_table() {
    std::vector<EngineOption> t;
    t.push_back(int_option("max-num-seqs", "max_num_seqs", 1, kNoMax,
                           "resident (running) sequences, one GDN state slot each; when not given, the default "
                           "is lowered to what half of the cache budget holds"));
    t.push_back(int_option("max-num-batched-tokens", "max_num_batched_tokens", 1, kNoMax,
                           "rows of one forward step (decodes, MTP verifies and prefill chunks)"));
    t.push_back(int_option("max-model-len", "max_model_len", 0, kNoMax,
                           "prompt + completion tokens per sequence; 0: the model's max_position_embeddings, "
                           "capped by the KV pages"));
    t.push_back(int_option("kv-block-size", "kv_block_size", 1, 1024, "tokens per KV page"));
    t.push_back(int_option("max-waiting", "max_waiting", 0, kNoMax,
                           "requests queued beyond the running ones; past it a submission is refused (retry)"));
    t.push_back(int_option("max-prefill-tokens-with-decodes", "max_prefill_tokens_with_decodes", 0, kNoMax,
                           "prompt rows per step while sequences decode (0: the step budget); lower values "
                           "bound the inter-token latency of running streams at some cost in throughput"));
    t.push_back(int_option("num-speculative-tokens", "num_speculative_tokens", 0, 3,
                           "MTP draft tokens proposed per step (needs a checkpoint with mtp.*)"));
    t.push_back(int_option("speculative-disable-by-batch-size", "speculative_disable_by_batch_size", 0, kNoMax,
                           "MTP drafts only while at most this many sequences run (0: always); above it steps "
                           "are plain decode steps, which cost less at full load than a verify step gives"));
    t.push_back(int_option("speculative-draft-vocab", "speculative_draft_vocab", 0, kNoMax,
                           "MTP drafts propose only token ids below this (the draft's lm_head reads that many "
                           "rows instead of the whole vocabulary: a byte-level BPE vocabulary is in merge order, "
                           "so its first ids are its most frequent pieces). Outputs do not change (every draft "
                           "is verified); fewer drafts may be accepted. At most the model's vocab_size; 0: the "
                           "whole vocabulary"));
    t.push_back(int_option("mtp-spare-slots", "mtp_spare_slots", 0, kNoMax,
                           "MTP verification: up to this many verified sequences a step also get the GDN state "
                           "after their last draft written into a spare state slot, and a sequence that "
                           "accepts every draft takes that slot instead of replaying its drafts (no GDN "
                           "commit); costs one state slot each (capped at max_num_seqs). 0: off (the commit "
                           "of accepted drafts)"));
    t.push_back(int_option("grammar-mask-threads", "grammar_mask_threads", 0, 256,
                           "threads (the engine's included) that fill the grammar masks of a step's "
                           "constrained rows (structured outputs); 0: the hardware's, at most 16; 1: serial"));
    t.push_back(int_option("num-state-snapshots", "num_state_snapshots", 0, kNoMax,
                           "GDN state snapshots kept for the prefix cache; 0: max(4, max_num_seqs / 4)"));
    t.push_back(int_option("cache-memory-mb", "cache_memory_mb", 1, kNoMax,
                           "KV pages + GDN state budget in MiB (the GPU measures it unless given)"));
    t.push_back(int_option("num-kv-blocks", "num_kv_blocks", 0, kNoMax,
                           "KV pages; 0: what the budget holds after the state slots"));

    EngineOption seed = int_option("prefix-cache-seed", "prefix_cache_seed", 0, kNoMax,
                                   "seed of the prefix cache's page hash (XXH3-128); -1: a random seed per "
                                   "process, so clients cannot predict page keys (fix it only to reproduce "
                                   "a run)");
    seed.off_value = -1;
    t.push_back(seed);

    EngineOption util = option("gpu-memory-utilization", "gpu_memory_utilization", OptionKind::kReal,
                               "share of GPU memory in use once the cache is allocated");
    util.min = 0;
    util.max = 1;
    util.min_open = true;
    t.push_back(util);

    EngineOption stall = option("engine-stall-timeout-s", "engine_stall_timeout_s", OptionKind::kReal,
                                "watchdog: when the engine loop has not come round for this many seconds (one "
                                "step that long, or a wedged loop) GET /health answers 503 and "
                                "qwenserve_engine_stalled is 1; set it above the longest legitimate step");
    stall.min = 0;
    stall.max = kNoMax;
    stall.min_open = true;
    t.push_back(stall);

    EngineOption accept = option("benchmark-mtp-acceptance", "benchmark_mtp_acceptance", OptionKind::kReal,
                                 "BENCHMARK ONLY, CHANGES OUTPUTS: accept each MTP draft with this probability "
                                 "whatever the model says, to time MTP at a chosen acceptance on dummy weights; "
                                 "-1: off");
    accept.min = 0;
    accept.max = 1;
    accept.off_value = -1;
    t.push_back(accept);

    EngineOption kv = option("kv-cache-dtype", "kv_cache_dtype", OptionKind::kChoice,
                             "K/V storage: bf16, fp8_e4m3 (alias fp8), or f32 (CPU only: exact reference)");
    kv.choices = {"bf16", "fp8_e4m3", "f32"};
    kv.aliases = {{"fp8", "fp8_e4m3"}};
    t.push_back(kv);

    EngineOption state = option("gdn-state-dtype", "gdn_state_dtype", OptionKind::kChoice,
                                "GDN recurrent state storage: f32, or bf16 (GPU only; math stays fp32)");
    state.choices = {"f32", "bf16"};
    t.push_back(state);

    t.push_back(option("no-chunked-prefill", "chunked_prefill", OptionKind::kOffSwitch,
                       "prefill a prompt in one step instead of chunks that share the token budget"));
    t.push_back(option("no-prefix-caching", "prefix_caching", OptionKind::kOffSwitch,
                       "do not reuse the KV pages and GDN snapshots of earlier prompts"));
    t.push_back(option("no-mtp-overlap", "mtp_overlap", OptionKind::kOffSwitch,
                       "MTP: wait for the draft ids at the end of each step instead of while the host emits "
                       "the outputs and schedules the next step (for timing the difference)"));
    return t;
}

std::string number(double v) { return fmt::format("{}", v); }

std::string range_text(const EngineOption& o) {
    const std::string off = o.off_value ? fmt::format(" (or {}: off)", number(*o.off_value)) : "";
    if (std::isinf(o.max)) return (o.min_open ? "> " : ">= ") + number(o.min) + off;
    return fmt::format("in {}{}, {}]{}", o.min_open ? "(" : "[", number(o.min), number(o.max), off);
}

}  // namespace

const std::vector<EngineOption>& engine_options() {
    static const std::vector<EngineOption> table = make_table();
    return table;
}

const EngineOption& engine_option(std::string_view name) {
    for (const auto& o : engine_options())
        if (o.name == name) return o;
    QS_CHECK_MSG(false, "engine_option: the name is not in the option table");
    std::abort();
}

std::set<std::string> engine_valued_option_names() {
    std::set<std::string> s;
    for (const auto& o : engine_options())
        if (o.takes_value()) s.emplace(o.name);
    return s;
}

std::set<std::string> engine_flag_option_names() {
    std::set<std::string> s;
    for (const auto& o : engine_options())
        if (!o.takes_value()) s.emplace(o.name);
    return s;
}

std::string option_range_text(const EngineOption& o) {
    return o.kind == OptionKind::kInt || o.kind == OptionKind::kReal ? range_text(o) : std::string();
}

Status check_option_range(const EngineOption& o, double v) {
    QS_CHECK(o.kind == OptionKind::kInt || o.kind == OptionKind::kReal);
    if (o.off_value && v == *o.off_value) return Status::ok();
    const bool above_min = o.min_open ? v > o.min : v >= o.min;
    if (above_min && v <= o.max) return Status::ok();
    return invalid_argument(fmt::format("{} must be {}, got {}", o.knob, range_text(o), number(v)));
}

Result<std::string_view> canonical_choice(const EngineOption& o, std::string_view value) {
    QS_CHECK(o.kind == OptionKind::kChoice && !o.choices.empty());
    for (std::string_view c : o.choices)
        if (c == value) return c;
    for (const auto& a : o.aliases)
        if (a.alias == value) return a.canonical;
    std::string list;
    for (size_t i = 0; i < o.choices.size(); ++i)
        list += fmt::format("{}'{}'", i == 0 ? "" : i + 1 == o.choices.size() ? " or " : ", ", o.choices[i]);
    return invalid_argument(fmt::format("--{} must be {}, got '{}'", o.name, list, value));
}

}  // namespace qs

// Engine knobs bound to the option table, their parsing and validation, and the capacity
// arithmetic (see engine_config.h).
#include "engine/engine_config.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <string_view>

#include "config/engine_options.h"
#include "core/check.h"
#include "core/log.h"
#include "engine/engine_config_text.h"

namespace qs {

namespace {

// Which field each numeric option of the table sets. Every kInt / kReal option of the table is
// bound below (tests/engine/engine_config_test.cpp checks that each one is parsed and validated).
struct IntField {
    std::string_view option;
    int64_t EngineConfig::*field;
};
constexpr IntField kIntFields[] = {
    {"max-num-seqs", &EngineConfig::max_num_seqs},
    {"max-num-batched-tokens", &EngineConfig::max_num_batched_tokens},
    {"max-model-len", &EngineConfig::max_model_len},
    {"kv-block-size", &EngineConfig::kv_block_size},
    {"max-waiting", &EngineConfig::max_waiting},
    {"max-prefill-tokens-with-decodes", &EngineConfig::max_prefill_tokens_with_decodes},
    {"num-speculative-tokens", &EngineConfig::num_speculative_tokens},
    {"speculative-disable-by-batch-size", &EngineConfig::speculative_disable_by_batch_size},
    {"speculative-draft-vocab", &EngineConfig::speculative_draft_vocab},
    {"num-state-snapshots", &EngineConfig::num_state_snapshots},
    {"mtp-spare-slots", &EngineConfig::mtp_spare_slots},
    {"grammar-mask-threads", &EngineConfig::grammar_mask_threads},
    {"cache-memory-mb", &EngineConfig::cache_memory_mb},
    {"num-kv-blocks", &EngineConfig::num_kv_blocks},
    {"prefix-cache-seed", &EngineConfig::prefix_cache_seed},
};
// Every kReal option of the table.
struct RealField {
    std::string_view option;
    double EngineConfig::*field;
};
constexpr RealField kRealFields[] = {
    {"gpu-memory-utilization", &EngineConfig::gpu_memory_utilization},
    {"benchmark-mtp-acceptance", &EngineConfig::benchmark_mtp_acceptance},
    {"engine-stall-timeout-s", &EngineConfig::engine_stall_timeout_s},
};

KvCacheDtype kv_dtype_from_name(std::string_view name) {
    if (name == "f32") return KvCacheDtype::kF32;
    if (name == "fp8_e4m3") return KvCacheDtype::kFP8E4M3;
    return KvCacheDtype::kBF16;
}

}  // namespace

const char* kv_cache_dtype_name(KvCacheDtype t) {
    switch (t) {
        case KvCacheDtype::kF32: return "f32";
        case KvCacheDtype::kBF16: return "bf16";
        case KvCacheDtype::kFP8E4M3: return "fp8_e4m3";
    }
    return "?";
}

Status EngineConfig::validate() const {
    for (const IntField& f : kIntFields)
        QS_RETURN_IF_ERROR(check_option_range(engine_option(f.option), double(this->*f.field)));
    for (const RealField& f : kRealFields)
        QS_RETURN_IF_ERROR(check_option_range(engine_option(f.option), this->*f.field));
    if (max_num_batched_tokens < max_num_seqs * (1 + num_speculative_tokens) && !enable_chunked_prefill)
        return invalid_argument("max_num_batched_tokens is too small for max_num_seqs decodes without chunked prefill");
    // Without chunking a prompt longer than the cap could never start while others decode.
    if (max_prefill_tokens_with_decodes > 0 && !enable_chunked_prefill)
        return invalid_argument("max_prefill_tokens_with_decodes needs chunked prefill (it cuts prompts into chunks)");
    return Status::ok();
}

std::string EngineConfig::describe() const {
    return fmt::format(
        "max_num_seqs={} max_num_batched_tokens={} max_model_len={} kv_block_size={} kv_cache_dtype={} "
        "max_prefill_tokens_with_decodes={} chunked_prefill={} prefix_caching={} max_waiting={} num_speculative_tokens={} "
        "speculative_disable_by_batch_size={} speculative_draft_vocab={} num_state_snapshots={} grammar_mask_threads={} "
        "cache_memory_mb={} num_kv_blocks={} gdn_state_dtype={} prefix_cache_seed={} engine_stall_timeout_s={} "
        "mtp_overlap={} mtp_spare_slots={}",
        max_num_seqs, max_num_batched_tokens, max_model_len, kv_block_size, kv_cache_dtype_name(kv_cache_dtype),
        max_prefill_tokens_with_decodes, enable_chunked_prefill, enable_prefix_caching, max_waiting,
        num_speculative_tokens, speculative_disable_by_batch_size, speculative_draft_vocab, num_state_snapshots,
        grammar_mask_threads,
        cache_memory_mb, num_kv_blocks, gdn_state_bf16 ? "bf16" : "f32",
        prefix_cache_seed >= 0 ? std::to_string(prefix_cache_seed) : std::string("random"), engine_stall_timeout_s,
        mtp_overlap, mtp_spare_slots) +
           (benchmark_mtp_acceptance >= 0.0
                ? fmt::format(" benchmark_mtp_acceptance={} (BENCHMARK ONLY: outputs are not the model's)",
                              benchmark_mtp_acceptance)
                : std::string());
}

const std::set<std::string>& EngineConfig::flag_options() {
    static const std::set<std::string> s = engine_flag_option_names();
    return s;
}

const std::set<std::string>& EngineConfig::valued_options() {
    static const std::set<std::string> s = engine_valued_option_names();
    return s;
}

Result<EngineConfig> EngineConfig::from_args(const Args& a) {
    EngineConfig c;
    for (const IntField& f : kIntFields) {
        QS_ASSIGN_OR_RETURN(c.*f.field, a.get_int(std::string(f.option), c.*f.field));
    }
    c.max_num_seqs_set = a.get("max-num-seqs").has_value();
    for (const RealField& f : kRealFields) {
        QS_ASSIGN_OR_RETURN(c.*f.field, a.get_double(std::string(f.option), c.*f.field));
    }
    const EngineOption& kv = engine_option("kv-cache-dtype");
    QS_ASSIGN_OR_RETURN(std::string_view kv_name,
                        canonical_choice(kv, a.get_or(std::string(kv.name), kv_cache_dtype_name(c.kv_cache_dtype))));
    c.kv_cache_dtype = kv_dtype_from_name(kv_name);
    const EngineOption& state = engine_option("gdn-state-dtype");
    QS_ASSIGN_OR_RETURN(std::string_view state_name,
                        canonical_choice(state, a.get_or(std::string(state.name), c.gdn_state_bf16 ? "bf16" : "f32")));
    c.gdn_state_bf16 = state_name == "bf16";
    c.enable_chunked_prefill = !a.has("no-chunked-prefill");
    c.enable_prefix_caching = !a.has("no-prefix-caching");
    c.mtp_overlap = !a.has("no-mtp-overlap");
    QS_RETURN_IF_ERROR(c.validate());
    return c;
}

std::string engine_option_value(const EngineConfig& c, std::string_view name) {
    for (const IntField& f : kIntFields)
        if (f.option == name) return std::to_string(c.*f.field);
    for (const RealField& f : kRealFields)
        if (f.option == name) return fmt::format("{}", c.*f.field);
    if (name == "kv-cache-dtype") return kv_cache_dtype_name(c.kv_cache_dtype);
    if (name == "gdn-state-dtype") return c.gdn_state_bf16 ? "bf16" : "f32";
    if (name == "no-chunked-prefill") return c.enable_chunked_prefill ? "0" : "1";
    if (name == "no-prefix-caching") return c.enable_prefix_caching ? "0" : "1";
    if (name == "no-mtp-overlap") return c.mtp_overlap ? "0" : "1";
    QS_CHECK_MSG(false, "engine_option_value: the option is not bound to a field");
    return {};
}

EngineConfig with_resolved_sizes(const EngineConfig& config, const CapacityPlan& plan) {
    EngineConfig c = config;
    c.max_model_len = plan.max_model_len;
    c.num_state_snapshots = plan.num_snapshot_slots;
    c.num_kv_blocks = plan.num_kv_blocks;
    return c;
}

EngineConfig EngineConfig::fitted(const ModelConfig& model, bool with_mtp) const {
    EngineConfig c = *this;
    if (max_num_seqs_set) return c;
    c.max_num_seqs = fit_max_num_seqs(model, *this, with_mtp);
    if (c.max_num_seqs < max_num_seqs)
        log_info("engine: max_num_seqs {} -> {}: the GDN states of more would not leave half of "
                 "cache_memory_mb {} for KV (set --max-num-seqs or --cache-memory-mb to choose)",
                 max_num_seqs, c.max_num_seqs, cache_memory_mb);
    return c;
}

std::string CapacityPlan::describe() const {
    return fmt::format(
        "KV: {} pages = {} tokens ({} B/token); state slots: {} running + {} snapshots + {} MTP spares ({:.2f} MB "
        "each); MTP stash {:.1f} MB; max_model_len {}; {:.1f} MB in all",
        num_kv_blocks, kv_capacity_tokens, kv_bytes_per_token, num_running_slots, num_snapshot_slots, num_spare_slots,
        double(state_bytes_per_slot) / 1e6, double(mtp_stash_bytes) / 1e6, max_model_len, double(total_bytes) / 1e6);
}

Result<CapacityPlan> plan_capacity(const ModelConfig& model, const EngineConfig& c, bool with_mtp) {
    CapacityPlan p;
    CacheGeometry g =
        CacheGeometry::for_model(model, 1, c.kv_block_size, 1, with_mtp && c.num_speculative_tokens > 0, c.kv_cache_dtype);
    g.state_bf16 = c.gdn_state_bf16;
    p.kv_bytes_per_token = g.kv_bytes_per_block() / size_t(c.kv_block_size);
    p.state_bytes_per_slot = g.state_bytes_per_slot();
    p.num_running_slots = c.max_num_seqs;
    p.num_snapshot_slots = !c.enable_prefix_caching ? 0
                           : c.num_state_snapshots  ? c.num_state_snapshots
                                                    : std::max<int64_t>(4, c.max_num_seqs / 4);
    // A verified sequence holds at most one spare for the step (EngineConfig::mtp_spare_slots).
    p.num_spare_slots = with_mtp && c.num_speculative_tokens > 0 ? std::min(c.mtp_spare_slots, c.max_num_seqs) : 0;
    if (with_mtp && c.num_speculative_tokens > 0)
        p.mtp_stash_bytes = size_t(c.max_num_seqs * (c.num_speculative_tokens + 1) * model.num_linear_attention_layers() *
                                   (model.linear_conv_dim() + 2 * model.linear_num_value_heads)) *
                            sizeof(float);
    const size_t state_bytes = p.state_bytes();
    // A budget below 1 MB (a measured budget gone negative: weights over the memory fraction) would
    // wrap around in the size arithmetic below and plan absurd page counts.
    if (c.num_kv_blocks <= 0 && c.cache_memory_mb < 1)
        return Status(ErrorKind::kInvalidArgument,
                      fmt::format("cache_memory_mb must be >= 1, got {} (raise the memory fraction or lower "
                                  "max_num_seqs)",
                                  c.cache_memory_mb));
    const size_t budget = size_t(c.cache_memory_mb) << 20;
    if (c.num_kv_blocks > 0) {
        p.num_kv_blocks = c.num_kv_blocks;
    } else {
        if (state_bytes >= budget)
            return Status(ErrorKind::kResourceExhausted,
                          fmt::format("cache_memory_mb {} cannot hold {} GDN state slots of {:.2f} MB (and {:.1f} MB "
                                      "of MTP stash); lower max_num_seqs or raise the budget",
                                      c.cache_memory_mb, p.total_state_slots(), double(p.state_bytes_per_slot) / 1e6,
                                      double(p.mtp_stash_bytes) / 1e6));
        p.num_kv_blocks = int64_t((budget - state_bytes) / g.kv_bytes_per_block());
    }
    p.kv_capacity_tokens = p.num_kv_blocks * c.kv_block_size;
    const int64_t wanted = c.max_model_len > 0 ? c.max_model_len : model.max_position_embeddings;
    p.max_model_len = std::min(wanted, p.kv_capacity_tokens);
    if (p.max_model_len < 1)
        return Status(ErrorKind::kResourceExhausted, "the KV budget holds no page: raise cache_memory_mb");
    p.total_bytes = state_bytes + size_t(p.num_kv_blocks) * g.kv_bytes_per_block();
    return p;
}

int64_t fit_max_num_seqs(const ModelConfig& model, const EngineConfig& config, bool with_mtp) {
    if (config.num_kv_blocks > 0) return config.max_num_seqs;
    const size_t half_budget = (size_t(config.cache_memory_mb) << 20) / 2;
    auto state_bytes = [&](int64_t seqs) {
        EngineConfig c = config;
        c.max_num_seqs = seqs;
        c.num_kv_blocks = 1;  // only the state arithmetic matters here
        auto p = plan_capacity(model, c, with_mtp);
        return p.is_ok() ? p->state_bytes() : SIZE_MAX;
    };
    // Monotone in seqs: binary search for the largest that fits.
    int64_t lo = 1, hi = config.max_num_seqs;
    if (state_bytes(hi) <= half_budget) return hi;
    while (lo < hi) {
        const int64_t mid = lo + (hi - lo + 1) / 2;
        if (state_bytes(mid) <= half_budget) lo = mid;
        else hi = mid - 1;
    }
    return lo;
}

}  // namespace qs

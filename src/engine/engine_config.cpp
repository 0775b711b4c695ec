// Engine knobs, their validation and the capacity arithmetic (see engine_config.h).
#include "engine/engine_config.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdint>

namespace qs {

const char* kv_cache_dtype_name(KvCacheDtype t) {
    switch (t) {
        case KvCacheDtype::kF32: return "f32";
        case KvCacheDtype::kBF16: return "bf16";
        case KvCacheDtype::kFP8E4M3: return "fp8_e4m3";
    }
    return "?";
}

Status EngineConfig::validate() const {
    auto bad = [](const char* name, int64_t v, const char* want) {
        return invalid_argument(fmt::format("{} must be {}, got {}", name, want, v));
    };
    if (max_num_seqs < 1) return bad("max_num_seqs", max_num_seqs, ">= 1");
    if (max_num_batched_tokens < 1) return bad("max_num_batched_tokens", max_num_batched_tokens, ">= 1");
    if (max_model_len < 0) return bad("max_model_len", max_model_len, ">= 0");
    if (kv_block_size < 1 || kv_block_size > 1024) return bad("kv_block_size", kv_block_size, "in [1, 1024]");
    if (max_waiting < 0) return bad("max_waiting", max_waiting, ">= 0");
    if (num_speculative_tokens < 0 || num_speculative_tokens > 3)
        return bad("num_speculative_tokens", num_speculative_tokens, "in [0, 3]");
    if (num_state_snapshots < 0) return bad("num_state_snapshots", num_state_snapshots, ">= 0");
    if (cache_memory_mb < 1) return bad("cache_memory_mb", cache_memory_mb, ">= 1");
    if (num_kv_blocks < 0) return bad("num_kv_blocks", num_kv_blocks, ">= 0");
    if (benchmark_mtp_acceptance != -1.0 && !(benchmark_mtp_acceptance >= 0.0 && benchmark_mtp_acceptance <= 1.0))
        return invalid_argument(fmt::format("benchmark_mtp_acceptance must be in [0, 1] (or -1: off), got {}",
                                            benchmark_mtp_acceptance));
    if (max_num_batched_tokens < max_num_seqs * (1 + num_speculative_tokens) && !enable_chunked_prefill)
        return invalid_argument("max_num_batched_tokens is too small for max_num_seqs decodes without chunked prefill");
    return Status::ok();
}

std::string EngineConfig::describe() const {
    return fmt::format(
        "max_num_seqs={} max_num_batched_tokens={} max_model_len={} kv_block_size={} kv_cache_dtype={} "
        "chunked_prefill={} prefix_caching={} max_waiting={} num_speculative_tokens={} num_state_snapshots={} "
        "cache_memory_mb={} num_kv_blocks={} gdn_state_dtype={}",
        max_num_seqs, max_num_batched_tokens, max_model_len, kv_block_size, kv_cache_dtype_name(kv_cache_dtype),
        enable_chunked_prefill, enable_prefix_caching, max_waiting, num_speculative_tokens, num_state_snapshots,
        cache_memory_mb, num_kv_blocks, gdn_state_bf16 ? "bf16" : "f32") +
           (benchmark_mtp_acceptance >= 0.0
                ? fmt::format(" benchmark_mtp_acceptance={} (BENCHMARK ONLY: outputs are not the model's)",
                              benchmark_mtp_acceptance)
                : std::string());
}

const std::set<std::string>& EngineConfig::flag_options() {
    static const std::set<std::string> s = {"no-chunked-prefill", "no-prefix-caching"};
    return s;
}

const std::set<std::string>& EngineConfig::valued_options() {
    static const std::set<std::string> s = {"max-num-seqs",  "max-num-batched-tokens", "max-model-len",
                                            "kv-block-size", "kv-cache-dtype",         "max-waiting",
                                            "num-speculative-tokens", "num-state-snapshots", "cache-memory-mb",
                                            "num-kv-blocks", "gpu-memory-utilization", "gdn-state-dtype",
                                            "benchmark-mtp-acceptance"};
    return s;
}

Result<EngineConfig> EngineConfig::from_args(const Args& a) {
    EngineConfig c;
    QS_ASSIGN_OR_RETURN(c.max_num_seqs, a.get_int("max-num-seqs", c.max_num_seqs));
    QS_ASSIGN_OR_RETURN(c.max_num_batched_tokens, a.get_int("max-num-batched-tokens", c.max_num_batched_tokens));
    QS_ASSIGN_OR_RETURN(c.max_model_len, a.get_int("max-model-len", c.max_model_len));
    QS_ASSIGN_OR_RETURN(c.kv_block_size, a.get_int("kv-block-size", c.kv_block_size));
    QS_ASSIGN_OR_RETURN(c.max_waiting, a.get_int("max-waiting", c.max_waiting));
    QS_ASSIGN_OR_RETURN(c.num_speculative_tokens, a.get_int("num-speculative-tokens", c.num_speculative_tokens));
    QS_ASSIGN_OR_RETURN(c.num_state_snapshots, a.get_int("num-state-snapshots", c.num_state_snapshots));
    QS_ASSIGN_OR_RETURN(c.cache_memory_mb, a.get_int("cache-memory-mb", c.cache_memory_mb));
    QS_ASSIGN_OR_RETURN(c.num_kv_blocks, a.get_int("num-kv-blocks", c.num_kv_blocks));
    QS_ASSIGN_OR_RETURN(c.gpu_memory_utilization, a.get_double("gpu-memory-utilization", c.gpu_memory_utilization));
    QS_ASSIGN_OR_RETURN(c.benchmark_mtp_acceptance, a.get_double("benchmark-mtp-acceptance", c.benchmark_mtp_acceptance));
    if (a.has("benchmark-mtp-acceptance") && !(c.benchmark_mtp_acceptance >= 0.0 && c.benchmark_mtp_acceptance <= 1.0))
        return invalid_argument(fmt::format("--benchmark-mtp-acceptance must be in [0, 1], got {}", c.benchmark_mtp_acceptance));
    if (!(c.gpu_memory_utilization > 0.0 && c.gpu_memory_utilization <= 1.0))
        return invalid_argument(fmt::format("--gpu-memory-utilization must be in (0, 1], got {}", c.gpu_memory_utilization));
    const std::string dt = a.get_or("kv-cache-dtype", "bf16");
    if (dt == "bf16") c.kv_cache_dtype = KvCacheDtype::kBF16;
    else if (dt == "fp8_e4m3" || dt == "fp8") c.kv_cache_dtype = KvCacheDtype::kFP8E4M3;
    else if (dt == "f32") c.kv_cache_dtype = KvCacheDtype::kF32;
    else return invalid_argument("--kv-cache-dtype must be bf16, fp8_e4m3 or f32, got '" + dt + "'");
    const std::string state = a.get_or("gdn-state-dtype", "f32");
    if (state != "f32" && state != "bf16")
        return invalid_argument("--gdn-state-dtype must be 'f32' or 'bf16', got '" + state + "'");
    c.gdn_state_bf16 = state == "bf16";
    c.enable_chunked_prefill = !a.has("no-chunked-prefill");
    c.enable_prefix_caching = !a.has("no-prefix-caching");
    QS_RETURN_IF_ERROR(c.validate());
    return c;
}

std::string CapacityPlan::describe() const {
    return fmt::format(
        "KV: {} pages = {} tokens ({} B/token); state slots: {} running + {} snapshots + {} MTP backups "
        "({:.2f} MB each); max_model_len {}; {:.1f} MB in all",
        num_kv_blocks, kv_capacity_tokens, kv_bytes_per_token, num_running_slots, num_snapshot_slots,
        num_backup_slots, double(state_bytes_per_slot) / 1e6, max_model_len, double(total_bytes) / 1e6);
}

Result<CapacityPlan> plan_capacity(const ModelConfig& model, const EngineConfig& c, bool with_mtp) {
    QS_RETURN_IF_ERROR(c.validate());
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
    p.num_backup_slots = c.num_speculative_tokens > 0 ? c.max_num_seqs : 0;
    const size_t state_bytes = size_t(p.total_state_slots()) * p.state_bytes_per_slot;
    const size_t budget = size_t(c.cache_memory_mb) << 20;
    if (c.num_kv_blocks > 0) {
        p.num_kv_blocks = c.num_kv_blocks;
    } else {
        if (state_bytes >= budget)
            return Status(ErrorKind::kResourceExhausted,
                          fmt::format("cache_memory_mb {} cannot hold {} GDN state slots of {:.2f} MB; lower "
                                      "max_num_seqs or raise the budget",
                                      c.cache_memory_mb, p.total_state_slots(), double(p.state_bytes_per_slot) / 1e6));
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
        return p.is_ok() ? size_t(p->total_state_slots()) * p->state_bytes_per_slot : SIZE_MAX;
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

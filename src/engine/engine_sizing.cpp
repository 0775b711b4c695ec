// Engine sizes on a backend (see engine_sizing.h).
#include "engine/engine_sizing.h"

#include <fmt/format.h>

#include "core/check.h"
#include "core/log.h"
#include "model/model_backend.h"

namespace qs {

size_t step_logits_bytes(const ModelConfig& model, const EngineConfig& config, bool with_mtp) {
    const int64_t rows_per_seq = 1 + (with_mtp ? config.num_speculative_tokens : 0);
    return size_t(config.max_num_seqs * rows_per_seq * model.vocab_size) * sizeof(float);
}

Result<EngineConfig> size_engine(const EngineConfig& config, Ops* ops, const ModelWeights& weights, bool on_gpu,
                                 bool budget_given, int64_t max_image_rows) {
    EngineConfig c = config;
    if (on_gpu && !budget_given) {
        QS_CHECK(ops != nullptr);
        QS_ASSIGN_OR_RETURN(const int64_t budget_mb, device_cache_budget_mb(*ops, weights, c.max_num_batched_tokens,
                                                                            c.gpu_memory_utilization, max_image_rows));
        const int64_t logits_mb = int64_t(step_logits_bytes(weights.config, c, weights.mtp.present) >> 20) + 1;
        if (budget_mb - logits_mb < 64)
            return Status(ErrorKind::kResourceExhausted,
                          fmt::format("the GPU has {} MB for the cache, and a step's logits ({} sequences × {} rows) "
                                      "need {} MB of it: lower max_num_seqs or num_speculative_tokens",
                                      budget_mb, c.max_num_seqs, 1 + c.num_speculative_tokens, logits_mb));
        c.cache_memory_mb = budget_mb - logits_mb;
        log_info("cache budget {} MB (gpu_memory_utilization {}; {} MB kept for a step's logits)", c.cache_memory_mb,
                 c.gpu_memory_utilization, logits_mb);
    }
    return c.fitted(weights.config, weights.mtp.present);
}

}  // namespace qs

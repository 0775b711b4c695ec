// The model on a backend (see model_backend.h).
#include "model/model_backend.h"

#include <vector>

#include "model/single_sequence.h"

namespace qs {

Result<int64_t> device_cache_budget_mb(Ops& ops, const ModelWeights& weights, int64_t max_batched_tokens,
                                       double utilization) {
    return gpu_cache_budget_mb(ops, weights.config, weights.mtp.present, utilization, max_batched_tokens,
                               [&](int64_t tokens) {
                                   Qwen36Model model(weights, ops);
                                   SingleSequence warm(model, tokens + 1, KvCacheDtype::kBF16);
                                   std::vector<int32_t> ids(static_cast<size_t>(tokens));
                                   for (size_t i = 0; i < ids.size(); ++i)
                                       ids[i] = int32_t((i * 7919) % size_t(weights.config.vocab_size));
                                   warm.feed(ids, false);
                               });
}

Result<std::unique_ptr<Ops>> make_backend(const BackendOptions& options, const ModelWeights& weights) {
    QS_ASSIGN_OR_RETURN(std::unique_ptr<Ops> ops, create_backend(options, weights.config));
    ops->prepare_weights(weight_set(weights));
    return ops;
}

}  // namespace qs

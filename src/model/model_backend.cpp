// The model on a backend (see model_backend.h).
#include "model/model_backend.h"

#include <fmt/format.h>

#include <vector>

#include "backend/cpu/cpu_collective.h"
#include "core/log.h"
#include "model/single_sequence.h"
#include "model/tensor_parallel.h"
#include "model/tensor_parallel_runner.h"

namespace qs {

Result<int64_t> device_cache_budget_mb(Ops& ops, const ModelWeights& weights, int64_t max_batched_tokens,
                                       double utilization, int64_t max_image_rows) {
    if (weights.visual && max_image_rows > 0) {
        const size_t held = ops.reserve_vision_tower(weights.visual->weights(), max_image_rows);
        log_info("vision tower: {:.2f} GiB of device memory reserved before the cache is sized (weights and the "
                 "activations of an image of {} patch rows, the largest the image processor makes)",
                 double(held) / double(1 << 30), max_image_rows);
    }
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

Result<std::unique_ptr<Ops>> make_backend(const BackendOptions& options, ModelWeights& weights) {
    QS_ASSIGN_OR_RETURN(std::unique_ptr<Ops> ops, create_backend(options, weights.config));
    ops->prepare_weights(weight_set(weights));
    return ops;
}

Result<std::unique_ptr<ModelRunner>> make_tensor_parallel_runner(const BackendOptions& options,
                                                                 const ModelWeights& weights) {
    const int64_t n = options.tensor_parallel_size;
    if (n < 2 || n > 64)
        return invalid_argument(fmt::format("--tensor-parallel-size: a group has 2..64 ranks, got {}", n));
    if (Status split = shard_config(weights.config, int(n), options.expert_parallel).status(); !split.is_ok())
        return invalid_argument("--tensor-parallel-size: " + split.message());
    if (options.device == "cuda") {
        const int gpus = cuda_device_count();
        if (gpus < n)
            return invalid_argument(fmt::format(
                "--tensor-parallel-size {} on --device cuda needs {} GPUs, one per rank; this process sees {}", n, n,
                gpus));
        return Status(ErrorKind::kUnsupported,
                      fmt::format("tensor parallel on CUDA needs {} GPUs; not yet run on multi-GPU hardware (the NCCL "
                                  "collective is built and tested on one GPU; serving runs tensor parallel on "
                                  "--device cpu only)",
                                  n));
    }
    if (options.device != "cpu")
        return invalid_argument("--device must be 'cpu' or 'cuda', got '" + options.device + "'");
    auto group = std::make_shared<InProcessGroup>(int(n));
    RankBackendFactory f;
    f.make_ops = [options](int, ModelWeights& shard) { return make_backend(options, shard); };
    f.make_collective = [group](int r, Ops&) -> Result<Collective*> { return &group->rank(r); };
    QS_ASSIGN_OR_RETURN(std::unique_ptr<TensorParallelRunner> runner,
                        TensorParallelRunner::create(weights, int(n), std::move(f), options.expert_parallel));
    return std::unique_ptr<ModelRunner>(std::move(runner));
}

}  // namespace qs

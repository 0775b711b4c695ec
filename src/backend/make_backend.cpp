// Backend selection (see make_backend.h).
#include "backend/make_backend.h"

#include <fmt/format.h>

#include "backend/cpu/cpu_ops.h"
#ifdef QS_HAVE_CUDA
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_ops.h"
#endif

namespace qs {

bool cuda_backend_available() {
#ifdef QS_HAVE_CUDA
    return cuda::cuda_device_available();
#else
    return false;
#endif
}

Result<int64_t> gpu_cache_budget_mb(Ops& ops, const ModelConfig& config, double utilization,
                                    const std::function<void()>& warm_up) {
    if (!(utilization > 0.0 && utilization <= 1.0))
        return invalid_argument(fmt::format("--gpu-memory-utilization must be in (0, 1], got {}", utilization));
#ifdef QS_HAVE_CUDA
    auto* cuda_ops = dynamic_cast<cuda::CudaOps*>(&ops);
    if (!cuda_ops) return invalid_argument("device_cache_budget_mb: not a GPU backend");
    warm_up();
    size_t free_b = 0, total_b = 0;
    QS_CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
    // The CUDA cache keeps one spare page and state slot for the padding rows of graph-replayed
    // decode batches (cuda_cache.h), outside the geometry the budget is turned into.
    const CacheGeometry one = CacheGeometry::for_model(config, 1, 16, 1, true, KvCacheDtype::kBF16);
    const double spare = double(one.kv_bytes_per_block() + one.state_bytes_per_slot());
    const double budget = double(total_b) * utilization - double(total_b - free_b) - spare;
    if (budget < double(64 << 20))
        return Status(ErrorKind::kResourceExhausted,
                      fmt::format("--gpu-memory-utilization {} leaves no room for the cache: weights and activations "
                                  "use {:.1f} of {:.1f} GiB",
                                  utilization, double(total_b - free_b) / double(1 << 30), double(total_b) / double(1 << 30)));
    return int64_t(budget / double(1 << 20));
#else
    return invalid_argument("device_cache_budget_mb: this build has no GPU backend");
#endif
}

Result<std::unique_ptr<Ops>> create_backend(const BackendOptions& options, const ModelConfig& config) {
    if (options.device == "cpu") {
        if (options.gdn_state_bf16) return invalid_argument("--gdn-state-dtype bf16 is only for --device cuda");
        return std::unique_ptr<Ops>(std::make_unique<CpuOps>());
    }
    if (options.device != "cuda") return invalid_argument("--device must be 'cpu' or 'cuda', got '" + options.device + "'");
#ifdef QS_HAVE_CUDA
    if (!cuda::cuda_device_available()) return invalid_argument("--device cuda: no CUDA device is visible");
    if (const std::string why = cuda::cuda_unsupported_reason(config); !why.empty())
        return Status(ErrorKind::kUnsupported, "--device cuda: " + why);
    cuda::CudaOptions co;
    co.ssm_bf16 = options.gdn_state_bf16;
    co.graph_max_batch = options.cuda_graph_max_batch;
    return std::unique_ptr<Ops>(std::make_unique<cuda::CudaOps>(co));
#else
    return invalid_argument("--device cuda: this build has no CUDA backend (nvcc was not found at configure time)");
#endif
}

}  // namespace qs

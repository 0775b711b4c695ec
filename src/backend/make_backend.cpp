// Backend selection (see make_backend.h).
#include "backend/make_backend.h"

#include <fmt/format.h>

#include "backend/batched_tokens_fit.h"
#include "backend/cpu/cpu_ops.h"
#include "core/log.h"
#ifdef QS_HAVE_CUDA
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

int cuda_device_count() {
#ifdef QS_HAVE_CUDA
    int n = 0;
    return cudaGetDeviceCount(&n) == cudaSuccess ? n : 0;
#else
    return 0;
#endif
}

Result<int64_t> gpu_cache_budget_mb(Ops& ops, const ModelConfig& config, bool with_mtp, double utilization,
                                    int64_t max_batched_tokens, const std::function<void(int64_t)>& warm_up) {
    if (!(utilization > 0.0 && utilization <= 1.0))
        return invalid_argument(fmt::format("--gpu-memory-utilization must be in (0, 1], got {}", utilization));
    if (!ops.device_memory()) return invalid_argument("device_cache_budget_mb: not a GPU backend");
    // The CUDA cache keeps one spare page and state slot for the padding rows of graph-replayed
    // decode batches (cuda_cache.h), outside the geometry the budget is turned into.
    const CacheGeometry one = CacheGeometry::for_model(config, 1, 16, 1, true, KvCacheDtype::kBF16);
    const double spare = double(one.kv_bytes_per_block() + one.state_bytes_per_slot());
    DeviceMemoryUse mem;
    if (max_batched_tokens > 512) {
        BatchedTokensFitInput in;
        warm_up(256);
        in.small = {256, ops.device_memory()->arena_high_water};
        warm_up(512);
        mem = *ops.device_memory();
        in.large = {512, mem.arena_high_water};
        in.arena_reserved_bytes = mem.arena_reserved;
        const CacheGeometry warm = CacheGeometry::for_model(config, 1, 16, 1, with_mtp, KvCacheDtype::kBF16);
        in.warm_cache_bytes_per_token = warm.kv_bytes_per_block() / 16;
        in.warm_cache_fixed_bytes = warm.state_bytes_per_slot() + warm.kv_bytes_per_block();
        in.free_bytes = mem.free_bytes;
        in.total_bytes = mem.total_bytes;
        in.utilization = utilization;
        in.keep_bytes = size_t(64 << 20) + size_t(spare);
        in.wanted_tokens = max_batched_tokens;
        const BatchedTokensFit fit = fit_batched_tokens(in);
        log_info("cuda: warm-up of {} tokens predicted at {:.2f} GiB ({:.2f} MiB per token); {:.2f} GiB available",
                 max_batched_tokens, double(fit.needed_bytes) / double(1 << 30),
                 double(fit.bytes_per_token) / double(1 << 20), double(fit.available_bytes) / double(1 << 30));
        if (!fit.fits) return Status(ErrorKind::kResourceExhausted, batched_tokens_oom_message(in, fit));
    }
    const size_t free_before = mem.free_bytes;
    warm_up(max_batched_tokens);
    const DeviceMemoryUse after = *ops.device_memory();
    const size_t free_b = after.free_bytes, total_b = after.total_bytes;
    if (max_batched_tokens > 512)  // the prediction's check: what the warm-up really took
        log_info("cuda: warm-up of {} tokens took the arena to {:.2f} GiB; {:.2f} GiB more device memory held "
                 "after it", max_batched_tokens, double(after.arena_reserved) / double(1 << 30),
                 (double(free_before) - double(free_b)) / double(1 << 30));
    const double budget = double(total_b) * utilization - double(total_b - free_b) - spare;
    if (budget < double(64 << 20))
        return Status(ErrorKind::kResourceExhausted,
                      fmt::format("--gpu-memory-utilization {} leaves no room for the cache: weights and activations "
                                  "use {:.1f} of {:.1f} GiB (lower --max-num-batched-tokens {} to shrink the "
                                  "activations, or raise --gpu-memory-utilization)",
                                  utilization, double(total_b - free_b) / double(1 << 30), double(total_b) / double(1 << 30),
                                  max_batched_tokens));
    return int64_t(budget / double(1 << 20));
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
    co.moe_int4_scratch = options.int4_expert_bf16_copies ? 0 : 1;
    // NVFP4 weights read as 4-bit where a kernel takes them, the experts packed only; with BF16
    // copies every NVFP4 path reads those (CudaOptions::nvfp4_kernels 0).
    co.nvfp4_kernels = options.int4_expert_bf16_copies ? 0 : 1;
    return std::unique_ptr<Ops>(std::make_unique<cuda::CudaOps>(co));
#else
    return invalid_argument("--device cuda: this build has no CUDA backend (nvcc was not found at configure time)");
#endif
}

}  // namespace qs

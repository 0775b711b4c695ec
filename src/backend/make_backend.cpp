// Backend selection (see make_backend.h).
#include "backend/make_backend.h"

#include "backend/cpu/cpu_ops.h"
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

Result<std::unique_ptr<Ops>> make_backend(const BackendOptions& options, const ModelWeights& weights) {
    if (options.device == "cpu") {
        if (options.gdn_state_bf16) return invalid_argument("--gdn-state-dtype bf16 is only for --device cuda");
        return std::unique_ptr<Ops>(std::make_unique<CpuOps>());
    }
    if (options.device != "cuda") return invalid_argument("--device must be 'cpu' or 'cuda', got '" + options.device + "'");
#ifdef QS_HAVE_CUDA
    if (!cuda::cuda_device_available()) return invalid_argument("--device cuda: no CUDA device is visible");
    cuda::CudaOptions co;
    co.ssm_bf16 = options.gdn_state_bf16;
    auto ops = std::make_unique<cuda::CudaOps>(co);
    ops->prepare_weights(weights);
    return std::unique_ptr<Ops>(std::move(ops));
#else
    return invalid_argument("--device cuda: this build has no CUDA backend (nvcc was not found at configure time)");
#endif
}

}  // namespace qs

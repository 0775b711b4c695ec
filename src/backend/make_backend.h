// Backend selection: creates the Ops a command runs on (`cpu`, the specification, or `cuda`,
// built when nvcc was found) for a model of a given config, and measures what a GPU has left for
// the cache. The model's side (uploading its weights, the warm-up forward) is
// model/model_backend.h. Used by the CLI commands before the engine starts.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "backend/ops.h"
#include "config/model_config.h"
#include "core/status.h"

namespace qs {

struct BackendOptions {
    std::string device = "cpu";  // cpu | cuda
    bool gdn_state_bf16 = false; // cuda: GDN recurrent state stored in bf16 (math in fp32)
    int64_t cuda_graph_max_batch = 512;  // cuda: decode batches up to this size replay CUDA graphs (0: off)
    // cuda: 4-bit experts (INT4 W4A16, NVFP4) also uploaded as BF16 (true), or packed only with a
    // one-layer BF16 scratch for the large-T MoE calls (false, the default since the H200's
    // seed-replay of INT4: 5,661 against 5,310 completion tok/s, the cache 97 GB against 37 GB;
    // --int4-expert-copies; CudaOptions::moe_int4_scratch). false also reads NVFP4 weights as 4-bit
    // (CudaOptions::nvfp4_kernels 1); true keeps every NVFP4 path on the BF16 copies.
    bool int4_expert_bf16_copies = false;
    // Ranks of the tensor-parallel group the model runs on (model/tensor_parallel_runner.h); 1: none.
    int64_t tensor_parallel_size = 1;
    // The group splits the routed experts over its ranks instead of their intermediate (CPU only).
    bool expert_parallel = false;
};

// Whether this build has the CUDA backend and a GPU is present.
bool cuda_backend_available();
// The GPUs this process sees (0 in a build without CUDA).
int cuda_device_count();

// GPU backends: the cache budget in MB that leaves `utilization` of the device's memory in use
// once the weights are loaded and `warm_up(max_batched_tokens)` (a forward of the largest step,
// run here after the arguments are checked) has sized the activation arena; `config` sizes the
// spare page and slot the CUDA cache keeps. Before that warm-up, two small ones (256 and 512
// tokens) predict its memory (backend/batched_tokens_fit.h): a step that cannot fit is an error
// naming --max-num-batched-tokens and a value that fits, not a cudaMalloc abort. Errors when
// nothing is left. Not for the CPU backend (its budget is a flag).
Result<int64_t> gpu_cache_budget_mb(Ops& ops, const ModelConfig& config, bool with_mtp, double utilization,
                                    int64_t max_batched_tokens, const std::function<void(int64_t)>& warm_up);

// Creates the backend for a model of `config`; the caller prepares the weights
// (Ops::prepare_weights) before the first forward. Errors name the problem: unknown device, a
// build without CUDA, no GPU, a config the CUDA kernels cannot run.
Result<std::unique_ptr<Ops>> create_backend(const BackendOptions& options, const ModelConfig& config);

}  // namespace qs

// Backend selection: creates the Ops a command runs on (`cpu`, the specification, or `cuda`,
// built when nvcc was found) and prepares the weights for it. Used by the CLI commands.
#pragma once

#include <memory>
#include <string>

#include "backend/ops.h"
#include "core/status.h"

namespace qs {

struct BackendOptions {
    std::string device = "cpu";  // cpu | cuda
    bool gdn_state_bf16 = false; // cuda: GDN recurrent state stored in bf16 (math in fp32)
    int64_t cuda_graph_max_batch = 512;  // cuda: decode batches up to this size replay CUDA graphs (0: off)
};

// Whether this build has the CUDA backend and a GPU is present.
bool cuda_backend_available();

// GPU backends: the cache budget in MB that leaves `utilization` of the device's memory in use
// once the weights are loaded and a warm-up forward of `max_batched_tokens` tokens has sized the
// activation arena. Errors when nothing is left. Not for the CPU backend (its budget is a flag).
Result<int64_t> device_cache_budget_mb(Ops& ops, const ModelWeights& weights, int64_t max_batched_tokens,
                                       double utilization);

// Creates the backend and uploads/prepares `weights` for it (they must outlive it). Errors name
// the problem: unknown device, a build without CUDA, no GPU.
Result<std::unique_ptr<Ops>> make_backend(const BackendOptions& options, const ModelWeights& weights);

}  // namespace qs

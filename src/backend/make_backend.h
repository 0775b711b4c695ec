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
};

// Whether this build has the CUDA backend and a GPU is present.
bool cuda_backend_available();

// Creates the backend and uploads/prepares `weights` for it (they must outlive it). Errors name
// the problem: unknown device, a build without CUDA, no GPU.
Result<std::unique_ptr<Ops>> make_backend(const BackendOptions& options, const ModelWeights& weights);

}  // namespace qs

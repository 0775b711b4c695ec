// Writes ModelWeights as a checkpoint directory (config.json + model.safetensors) in the real
// tensor naming, for tests, converters and dummy checkpoints. The inverse of load_model_weights.
#pragma once

#include <string>

#include "core/status.h"
#include "model/weights.h"

namespace qs {

struct SaveOptions {
    std::string prefix = "model.language_model.";  // or "model."
    bool fused_experts = true;                       // 3-D gate_up_proj/down_proj, else per expert
    DType dtype = DType::kBF16;                      // for matrices and embeddings
};

// Writes DIR/model.safetensors and DIR/config.json (model_config_to_json's layout).
Status save_model_dir(const ModelWeights& w, const std::string& dir, const SaveOptions& options = {});

}  // namespace qs

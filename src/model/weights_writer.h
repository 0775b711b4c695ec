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
    DType dtype = DType::kBF16;                      // for dense matrices and embeddings
    // kFP8Block: the linears fp8_role() marks kQuantized are written as F8_E4M3 + weight_scale_inv
    // (quantised, or copied when already FP8; fused expert tensors get `<name>_scale_inv`
    // [E, ⌈rows/128⌉, ⌈cols/128⌉]) and config.json gets a quantization_config. kDense: every
    // linear is written dense in `dtype` (FP8 ones dequantised).
    WeightFormat format = WeightFormat::kDense;
    DType scale_dtype = DType::kF32;  // scales of newly quantised linears: F32 or BF16
};

// Writes DIR/model.safetensors and DIR/config.json (model_config_to_json's layout).
Status save_model_dir(const ModelWeights& w, const std::string& dir, const SaveOptions& options = {});

}  // namespace qs

// The vision tower's configuration: config.json's `vision_config` (spec §1.3), read as
// transformers 5.17's Qwen3_5MoeVisionConfig reads it (its defaults for absent keys: the 35B-A3B
// release values but out_hidden_size 3584, which every shipped checkpoint sets). Every bad field
// is named.
#pragma once

#include <string>

#include <nlohmann/json_fwd.hpp>

#include "core/status.h"

namespace qs {

struct VisionConfig {
    int depth = 27;
    int hidden_size = 1152;
    int intermediate_size = 4304;
    int num_heads = 16;
    int in_channels = 3;
    int patch_size = 16;
    int spatial_merge_size = 2;
    int temporal_patch_size = 2;
    int out_hidden_size = 3584;
    int num_position_embeddings = 2304;
    std::string hidden_act = "gelu_pytorch_tanh";
    double rope_theta = 10000.0;  // rope_parameters.rope_theta (rope_type "axial")

    int head_dim() const { return hidden_size / num_heads; }
    int patch_dim() const { return in_channels * temporal_patch_size * patch_size * patch_size; }

    bool operator==(const VisionConfig&) const = default;
};

// `j` is the vision_config object.
Result<VisionConfig> parse_vision_config(const nlohmann::json& j);

}  // namespace qs

// The Qwen3.5/3.6 vision tower (spec §1.3): loads model.visual.* into the backend's
// VisionWeights (plain host fp32 tensors) and runs Ops::vision_tower over images' patch rows
// (from image/image_processor): patch embedding (the Conv3d as a linear map over C·T·P·P) +
// learned position embeddings bilinearly resampled (align_corners) from the side × side table to
// each image's grid → `depth` pre-LayerNorm blocks (2-D axial rotary on q/k, full attention within
// each image only, GELU-tanh MLP) → the merger (LayerNorm, 2×2 neighbours concatenated, fc1, exact
// GELU, fc2 to out_hidden_size): one embedding per merged token, the rows that replace the
// image's <|image_pad|> tokens. The host reference (backend/cpu/cpu_vision.cpp) is checked against
// transformers 5.17 in tests/model/vision_tower_test.cpp. Not thread-safe to load; forward is
// const and may run on any thread (Ops::vision_tower's contract).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "backend/ops.h"
#include "backend/vision_weights.h"
#include "config/vision_config.h"
#include "core/status.h"
#include "image/image_processor.h"
#include "io/checkpoint.h"

namespace qs {

class VisionTower {
public:
    // Reads `prefix`* (model.visual.*) as f32 from any float dtype; a missing tensor or a wrong
    // shape is an error naming it.
    static Result<VisionTower> load(const Checkpoint& ckpt, const VisionConfig& cfg,
                                    const std::string& prefix = "model.visual.");

    // The values of one tensor, named as in a checkpoint without the prefix ("blocks.0.attn.qkv.weight"),
    // of the shape the config implies (the Conv3d patch embedding as [H, C, T, P, P]).
    using TensorReader =
        std::function<Result<std::vector<float>>(const std::string& name, const std::vector<int64_t>& shape)>;
    // Every tensor of the config's tower from `read` (load: a checkpoint; model/dummy_vision_tower:
    // random values).
    static Result<VisionTower> build(const VisionConfig& cfg, const TensorReader& read);

    const VisionConfig& config() const { return cfg_; }

    const VisionWeights& weights() const { return w_; }

    // [sum of merged tokens][out_hidden_size], images in order, computed by `ops` (null: the host
    // reference). `blocks_out`, when given, gets the last block's output [sum of patch rows]
    // [hidden_size] (for tests). A patch row width or grid the tower cannot take is an error.
    Result<std::vector<float>> forward(const std::vector<const ImagePatches*>& images, Ops* ops = nullptr,
                                       std::vector<float>* blocks_out = nullptr) const;

private:
    VisionConfig cfg_;
    VisionWeights w_;
};

}  // namespace qs

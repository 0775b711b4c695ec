// The Qwen3.5/3.6 vision tower (spec §1.3), reference forward on the host in fp32: clear before
// fast, the specification a backend kernel is checked against. Images' patch rows (from
// image/image_processor) → patch embedding (the Conv3d as a linear map over C·T·P·P) + learned
// position embeddings bilinearly resampled (align_corners) from the side × side table to each
// image's grid → `depth` pre-LayerNorm blocks (2-D axial rotary on q/k, full attention within each
// image only, GELU-tanh MLP) → the merger (LayerNorm, 2×2 neighbours concatenated, fc1, exact GELU,
// fc2 to out_hidden_size): one embedding per merged token, the rows that replace the image's
// <|image_pad|> tokens. Patch rows are in the processor's merge-block order, so a merged token is 4
// consecutive rows. Checked against transformers 5.17 in tests/model/vision_tower_test.cpp.
// Not thread-safe to load; forward is const and may run on any thread.
#pragma once

#include <string>
#include <vector>

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

    const VisionConfig& config() const { return cfg_; }

    // [sum of merged tokens][out_hidden_size], images in order. `blocks_out`, when given, gets the
    // last block's output [sum of patch rows][hidden_size] (for tests).
    Result<std::vector<float>> forward(const std::vector<const ImagePatches*>& images,
                                       std::vector<float>* blocks_out = nullptr) const;

private:
    struct Linear {
        std::vector<float> w;  // [out][in]
        std::vector<float> b;  // [out]
        int in = 0, out = 0;
    };
    struct Norm {
        std::vector<float> w, b;
    };
    struct Block {
        Norm norm1, norm2;
        Linear qkv, proj, fc1, fc2;
    };

    VisionConfig cfg_;
    Linear patch_embed_;
    std::vector<float> pos_embed_;  // [num_position_embeddings][hidden]
    std::vector<Block> blocks_;
    Norm merger_norm_;
    Linear merger_fc1_, merger_fc2_;
};

}  // namespace qs

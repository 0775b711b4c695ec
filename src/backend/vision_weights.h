// VisionWeights: the vision tower's tensors (spec §1.3) as plain host fp32 tensors, the input of
// Ops::vision_tower. model/vision_tower loads them from model.visual.* and owns them; a backend
// reads them (CUDA: uploads them once, keyed by the struct's address). No model types here.
#pragma once

#include <cstdint>
#include <vector>

namespace qs {

struct VisionDims {
    int hidden = 0;        // hidden_size
    int heads = 0;         // num_heads; head_dim = hidden / heads
    int intermediate = 0;  // intermediate_size (block MLP)
    int patch_dim = 0;     // C·T·P·P values per patch row
    int pos_side = 0;      // the learned position table is pos_side × pos_side
    int merge = 2;         // spatial_merge_size: merge² consecutive rows make one merged token
    int out_hidden = 0;    // out_hidden_size (the text model's hidden size)
    double rope_theta = 10000.0;
    double ln_eps = 1e-6;  // every LayerNorm
    int head_dim() const { return heads > 0 ? hidden / heads : 0; }
};

struct VisionLinear {
    std::vector<float> w;  // [out][in]
    std::vector<float> b;  // [out]
    int in = 0, out = 0;
};

struct VisionNorm {
    std::vector<float> w, b;  // [hidden] LayerNorm weight and bias
};

struct VisionBlockWeights {
    VisionNorm norm1, norm2;
    VisionLinear qkv, proj, fc1, fc2;  // qkv: [3·hidden][hidden]
};

struct VisionWeights {
    VisionDims dims;
    VisionLinear patch_embed;         // the Conv3d as [hidden][patch_dim]
    std::vector<float> pos_embed;     // [pos_side²][hidden]
    std::vector<VisionBlockWeights> blocks;
    VisionNorm merger_norm;
    VisionLinear merger_fc1, merger_fc2;  // [merge²·hidden]² and [out_hidden][merge²·hidden]
};

// One image's grid in patches (t frames of h × w); its rows are t·h·w patch rows in the image
// processor's merge-block order.
struct VisionGrid {
    int t = 1, h = 0, w = 0;
    int64_t rows() const { return int64_t(t) * h * w; }
};

}  // namespace qs

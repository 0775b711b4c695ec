// One Ops::rms_norm_linears call on a projection group of the real model's layer (attention q/k/v, or
// the GDN qkv/z/b/a), with x (and pending) uploaded and every result read back: the GPU tests that
// compare the paths of the input norm (cuda_fused_input_norm_test.cpp, cuda_norm_quant_test.cpp).
#pragma once

#include <vector>

#include "gpu_test_util.h"
#include "model/weights.h"

namespace qs::gpu_test {

// The input norm's projection groups of a model's first full-attention and first GDN layer.
struct NormLinearsGroup {
    const char* name;
    const ParamVector* norm;
    std::vector<const LinearWeight*> ws;
};
inline std::vector<NormLinearsGroup> input_norm_groups(const ModelWeights& w) {
    const DecoderLayerWeights *attn = nullptr, *gdn = nullptr;
    for (const auto& l : w.layers) {
        if (l.type == LayerType::kFullAttention && attn == nullptr) attn = &l;
        if (l.type != LayerType::kFullAttention && gdn == nullptr) gdn = &l;
    }
    EXPECT_TRUE(attn != nullptr && gdn != nullptr) << "a model with both layer types";
    if (attn == nullptr || gdn == nullptr) return {};
    return {{"attention q/k/v", &attn->input_layernorm, {&attn->attn.q_proj, &attn->attn.k_proj, &attn->attn.v_proj}},
            {"gdn qkv/z/b/a", &gdn->input_layernorm,
             {&gdn->gdn.in_proj_qkv, &gdn->gdn.in_proj_z, &gdn->gdn.in_proj_b, &gdn->gdn.in_proj_a}}};
}

struct NormLinearsRun {
    std::vector<float> h, x, pending;       // pending empty when the call had none
    std::vector<std::vector<float>> ys;     // one per weight, [T, out_features]
};

inline NormLinearsRun run_rms_norm_linears(cuda::CudaOps& ops, const ParamVector& norm,
                                           const std::vector<const LinearWeight*>& ws, const std::vector<float>& x,
                                           const std::vector<float>* pending, int64_t T, int64_t H, double eps) {
    float* dx = to_device(ops, x);
    float* dp = pending != nullptr ? to_device(ops, *pending) : nullptr;
    float* h = ops.alloc(T * H);
    std::vector<float*> ys;
    for (const LinearWeight* l : ws) ys.push_back(ops.alloc(T * l->out_features));
    if (ws.size() == 3) {
        ops.rms_norm_linears(dx, dp, norm, T, H, eps, h, {{*ws[0], ys[0]}, {*ws[1], ys[1]}, {*ws[2], ys[2]}});
    } else {
        EXPECT_EQ(ws.size(), 4u);
        ops.rms_norm_linears(dx, dp, norm, T, H, eps, h,
                             {{*ws[0], ys[0]}, {*ws[1], ys[1]}, {*ws[2], ys[2]}, {*ws[3], ys[3]}});
    }
    NormLinearsRun r;
    r.h = to_host(ops, h, size_t(T * H));
    r.x = to_host(ops, dx, size_t(T * H));
    if (dp != nullptr) r.pending = to_host(ops, dp, size_t(T * H));
    for (size_t i = 0; i < ys.size(); ++i) r.ys.push_back(to_host(ops, ys[i], size_t(T * ws[i]->out_features)));
    ops.free_all();
    return r;
}

}  // namespace qs::gpu_test

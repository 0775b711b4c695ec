// for_each_linear: every linear of a ModelWeights with a label (the model tests compare two
// loads of one model linear by linear).
#pragma once

#include <functional>
#include <string>

#include "model/weights.h"

namespace qs::test {

// Every linear of the model with a label.
inline void for_each_linear(const ModelWeights& w, const std::function<void(const std::string&, const LinearWeight&)>& f) {
    auto layer = [&](const std::string& p, const DecoderLayerWeights& l) {
        if (l.type == LayerType::kFullAttention) {
            f(p + "q", l.attn.q_proj), f(p + "k", l.attn.k_proj), f(p + "v", l.attn.v_proj), f(p + "o", l.attn.o_proj);
        } else {
            f(p + "qkv", l.gdn.in_proj_qkv), f(p + "z", l.gdn.in_proj_z), f(p + "a", l.gdn.in_proj_a);
            f(p + "b", l.gdn.in_proj_b), f(p + "out", l.gdn.out_proj);
        }
        f(p + "router", l.moe.router), f(p + "shared_gate", l.moe.shared_expert_gate);
        f(p + "shared.gate", l.moe.shared_expert.gate_proj), f(p + "shared.up", l.moe.shared_expert.up_proj);
        f(p + "shared.down", l.moe.shared_expert.down_proj);
        for (size_t e = 0; e < l.moe.experts.size(); ++e) {
            const std::string q = p + "e" + std::to_string(e) + ".";
            f(q + "gate", l.moe.experts[e].gate_proj), f(q + "up", l.moe.experts[e].up_proj);
            f(q + "down", l.moe.experts[e].down_proj);
        }
    };
    for (size_t i = 0; i < w.layers.size(); ++i) layer("layer" + std::to_string(i) + ".", w.layers[i]);
    f("lm_head", w.lm_head);
    if (w.mtp.present) {
        f("mtp.fc", w.mtp.fc);
        layer("mtp.", w.mtp.layer);
    }
}

}  // namespace qs::test

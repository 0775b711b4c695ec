// ModelWeights → the backend's WeightSet (see weights.h). The loaders are weights_loader.cpp,
// the dummy weights dummy_weights.cpp.
#include "model/weights.h"

namespace qs {

namespace {
void add_layer(const DecoderLayerWeights& l, WeightSet& s) {
    s.entries.emplace_back(&l.input_layernorm);
    s.entries.emplace_back(&l.post_attention_layernorm);
    if (l.type == LayerType::kFullAttention) {
        for (const LinearWeight* p : {&l.attn.q_proj, &l.attn.k_proj, &l.attn.v_proj, &l.attn.o_proj})
            s.entries.emplace_back(p);
        s.entries.emplace_back(&l.attn.q_norm);
        s.entries.emplace_back(&l.attn.k_norm);
    } else {
        s.entries.emplace_back(&l.gdn);
    }
    s.entries.emplace_back(&l.moe);
}
}  // namespace

WeightSet weight_set(const ModelWeights& w) {
    WeightSet s;
    s.config = &w.config;
    s.lm_head = &w.lm_head;
    s.entries.emplace_back(&w.embed_tokens);
    for (const DecoderLayerWeights& l : w.layers) add_layer(l, s);
    s.entries.emplace_back(&w.norm);
    s.entries.emplace_back(&w.lm_head);
    if (w.mtp.present) {
        s.entries.emplace_back(&w.mtp.pre_fc_norm_embedding);
        s.entries.emplace_back(&w.mtp.pre_fc_norm_hidden);
        s.entries.emplace_back(&w.mtp.fc);
        add_layer(w.mtp.layer, s);
        s.entries.emplace_back(&w.mtp.norm);
    }
    return s;
}

}  // namespace qs

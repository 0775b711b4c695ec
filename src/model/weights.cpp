// ModelWeights → the backend's WeightSet (see weights.h). The loaders are weights_loader.cpp,
// the dummy weights dummy_weights.cpp.
#include "model/weights.h"

namespace qs {

namespace {
void add_layer(DecoderLayerWeights& l, WeightSet& s) {
    s.add_vector(l.input_layernorm);
    s.add_vector(l.post_attention_layernorm);
    if (l.type == LayerType::kFullAttention) {
        for (LinearWeight* p : {&l.attn.q_proj, &l.attn.k_proj, &l.attn.v_proj, &l.attn.o_proj}) s.add_linear(*p);
        s.add_vector(l.attn.q_norm);
        s.add_vector(l.attn.k_norm);
    } else {
        s.add_gdn(l.gdn);
    }
    s.add_moe(l.moe);
}
}  // namespace

WeightSet weight_set(ModelWeights& w) {
    WeightSet s;
    s.config = &w.config;
    s.lm_head = &w.lm_head;
    s.add_table(w.embed_tokens);
    for (DecoderLayerWeights& l : w.layers) add_layer(l, s);
    s.add_vector(w.norm);
    s.add_linear(w.lm_head);
    if (w.mtp.present) {
        s.add_vector(w.mtp.pre_fc_norm_embedding);
        s.add_vector(w.mtp.pre_fc_norm_hidden);
        s.add_linear(w.mtp.fc);
        add_layer(w.mtp.layer, s);
        s.add_vector(w.mtp.norm);
    }
    return s;
}

}  // namespace qs

// NullOps (see null_ops.h).
#include "backend/null/null_ops.h"

#include <algorithm>

#include "core/check.h"

namespace qs {

float* NullOps::alloc(int64_t n) {
    float* p = static_cast<float*>(std::calloc(size_t(std::max<int64_t>(n, 1)), sizeof(float)));
    QS_CHECK(p != nullptr);
    buffers_.emplace_back(p);
    return p;
}

// Every buffer holds zeros, so the copy is a fill (the source pages stay untouched).
void NullOps::copy_to_host(const float* src, int64_t n, float* dst) { std::fill_n(dst, n, 0.0f); }

ModelWeights make_shape_only_weights(const ModelConfig& config, bool with_mtp) {
    ModelWeights w;
    w.config = config;
    w.layers.resize(config.layer_types.size());
    for (size_t i = 0; i < w.layers.size(); ++i) w.layers[i].type = config.layer_types[i];
    w.mtp.present = with_mtp;
    w.mtp.layer.type = LayerType::kFullAttention;
    return w;
}

}  // namespace qs

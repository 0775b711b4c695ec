// WeightSet: every weight a model's forward will pass to the ops, listed for
// Ops::prepare_weights (the CUDA backend uploads each once and finds the copy again by the host
// address of the view an op receives). The model builds it (model/weights.h: weight_set) from
// the views it holds; the backend reads it and never sees how the model groups them. Built and
// read on the thread that prepares the backend.
#pragma once

#include <variant>
#include <vector>

#include "backend/layer_weights.h"
#include "backend/linear_weight.h"
#include "config/model_config.h"

namespace qs {

struct WeightSet {
    // One entry per tensor, or per GDN layer / MoE block, whose tensors the backend enumerates
    // itself (it decides their device formats: e.g. the router, the shared-expert gate and GDN's
    // in_proj_a/b stay fp32 on the GPU).
    using Entry = std::variant<const WeightBuffer*,        // an embedding table [vocab, hidden]
                               const std::vector<float>*,  // a parameter vector (norms, q/k norm)
                               const LinearWeight*,        // a linear outside GDN and MoE
                               const GdnWeights*,          // a GDN layer
                               const MoeWeights*>;         // a sparse MoE block
    // The model's config: what the backend checks it can run, and the MoE's experts per token.
    const ModelConfig* config = nullptr;
    std::vector<Entry> entries;  // in upload order
    // The output projection (also among entries), which the CUDA backend profiles apart.
    const LinearWeight* lm_head = nullptr;
};

}  // namespace qs

// WeightSet: every weight a model's forward will pass to the ops, listed for
// Ops::prepare_weights. Listing a view numbers it (weight_handle.h): the set writes a handle into
// each view — one counter per kind, in the set's order — and a backend that copies the weights
// (CUDA) files its copy of each at that handle, so an op finds it from the view alone. The model
// builds the set (model/weights.h: weight_set) from the views it owns; the backend reads it and
// never sees how the model groups them. Built and read on the thread that prepares the backend.
#pragma once

#include <cstdint>
#include <variant>
#include <vector>

#include "backend/layer_weights.h"
#include "backend/linear_weight.h"
#include "backend/weight_handle.h"
#include "config/model_config.h"

namespace qs {

class WeightSet {
public:
    // One entry per tensor, or per GDN layer / MoE block, whose tensors the backend enumerates
    // itself (it decides their device formats: e.g. the router, the shared-expert gate and GDN's
    // in_proj_a/b stay fp32 on the GPU).
    using Entry = std::variant<const WeightBuffer*,  // an embedding table [vocab, hidden]
                               const ParamVector*,   // a parameter vector (norms, q/k norm)
                               const LinearWeight*,  // a linear outside GDN and MoE
                               const GdnWeights*,    // a GDN layer: its five linears and four vectors
                               const MoeWeights*>;   // a sparse MoE block: router, gate, the experts

    // The model's config: what the backend checks it can run, and the MoE's experts per token.
    const ModelConfig* config = nullptr;
    // The output projection (also among entries), which the CUDA backend profiles apart.
    const LinearWeight* lm_head = nullptr;

    // Appends an entry and numbers its views (a GDN layer's linears and vectors, a MoE block's
    // router and shared-expert gate as linears and its experts as one table). The views must
    // outlive every backend the set is prepared on and keep their addresses.
    void add_table(WeightBuffer& table);
    void add_vector(ParamVector& v);
    void add_linear(LinearWeight& w);
    void add_gdn(GdnWeights& g);
    void add_moe(MoeWeights& m);

    const std::vector<Entry>& entries() const { return entries_; }  // in upload order
    // How many handles of each kind the set gave out: a backend's tables have these sizes.
    int32_t num_tables() const { return num_tables_; }
    int32_t num_vectors() const { return num_vectors_; }
    int32_t num_linears() const { return num_linears_; }
    int32_t num_expert_tables() const { return num_expert_tables_; }

private:
    void number(ParamVector& v) { v.handle.index = num_vectors_++; }
    void number(LinearWeight& w) { w.handle.index = num_linears_++; }

    std::vector<Entry> entries_;
    int32_t num_tables_ = 0, num_vectors_ = 0, num_linears_ = 0, num_expert_tables_ = 0;
};

}  // namespace qs

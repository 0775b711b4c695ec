// The per-layer weights the ops take (backend/ops.h): a Gated DeltaNet layer's and a sparse MoE
// block's tensors, as LinearWeight views and fp32 parameter vectors. The model fills them from
// its checkpoint (model/weights.h, which groups them into decoder layers); the backends read them.
// Spec: shared/spec/model.md §2.4, §2.5.
#pragma once

#include <vector>

#include "backend/linear_weight.h"
#include "backend/weight_handle.h"

namespace qs {

// Gated DeltaNet (spec §2.4).
struct GdnWeights {
    LinearWeight in_proj_qkv;  // [conv_dim = 2*Kdim + Vdim, hidden]
    LinearWeight in_proj_z;    // [Vdim, hidden]
    LinearWeight in_proj_b;    // [linear_num_value_heads, hidden]
    LinearWeight in_proj_a;    // [linear_num_value_heads, hidden]
    LinearWeight out_proj;     // [hidden, Vdim]
    ParamVector conv1d;   // [conv_dim, conv_kernel]; tap conv_kernel-1 multiplies the current token
    ParamVector A_log;    // [linear_num_value_heads]
    ParamVector dt_bias;  // [linear_num_value_heads]
    ParamVector norm;     // [linear_value_head_dim], plain scale (not 1 + w)
};

struct ExpertWeights {
    LinearWeight gate_proj;  // [intermediate, hidden]
    LinearWeight up_proj;    // [intermediate, hidden]
    LinearWeight down_proj;  // [hidden, intermediate]
};

// Sparse MoE block with a shared expert (spec §2.5).
struct MoeWeights {
    LinearWeight router;                // mlp.gate: [num_experts, hidden]
    std::vector<ExpertWeights> experts; // [num_experts]
    ExpertWeights shared_expert;        // intermediate = shared_expert_intermediate_size
    LinearWeight shared_expert_gate;    // [1, hidden]
    // The backend's copy of the experts as one table (weight_handle.h: the CUDA grouped GEMM's
    // per-expert pointer arrays); the expert linears themselves get no handles.
    WeightHandle experts_handle{};
};

}  // namespace qs

// ModelWeights: every tensor of the Qwen3.6 text model and its MTP block, grouped by layer.
// Filled from a checkpoint (load_model_weights) or with random values (make_dummy_weights).
// Large matrices stay in their storage format (LinearWeight); small vectors (norms, A_log,
// dt_bias, conv taps) are converted to float32 at load. Spec: shared/spec/model.md §2.0, §3.1.
// The GDN and MoE blocks are the backend's types (backend/layer_weights.h: the ops take them);
// the grouping into layers, the loaders and the dummy weights are the model's.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "backend/layer_weights.h"
#include "backend/linear_weight.h"
#include "backend/weight_set.h"
#include "config/model_config.h"
#include "core/status.h"
#include "model/vision_tower.h"

namespace qs {

class Checkpoint;

// Gated full attention (spec §2.3).
struct AttentionWeights {
    LinearWeight q_proj;  // [num_heads * head_dim * 2, hidden]: per head, query then gate
    LinearWeight k_proj;  // [num_kv_heads * head_dim, hidden]
    LinearWeight v_proj;  // [num_kv_heads * head_dim, hidden]
    LinearWeight o_proj;  // [hidden, num_heads * head_dim]
    ParamVector q_norm;  // [head_dim], zero-centred (scale 1 + w)
    ParamVector k_norm;  // [head_dim], zero-centred
};

struct DecoderLayerWeights {
    LayerType type = LayerType::kLinearAttention;
    ParamVector input_layernorm;           // [hidden], zero-centred
    ParamVector post_attention_layernorm;  // [hidden], zero-centred
    AttentionWeights attn;  // when type == kFullAttention
    GdnWeights gdn;         // when type == kLinearAttention
    MoeWeights moe;
};

// The MTP draft block (spec §3): shares embed_tokens and lm_head with the main model.
struct MtpWeights {
    bool present = false;
    ParamVector pre_fc_norm_embedding;  // [hidden], zero-centred
    ParamVector pre_fc_norm_hidden;     // [hidden], zero-centred
    LinearWeight fc;                           // [hidden, 2 * hidden]; input = [embedding ; hidden]
    DecoderLayerWeights layer;                 // a full-attention MoE decoder layer
    ParamVector norm;                   // [hidden], zero-centred
};

struct ModelWeights {
    ModelConfig config;
    WeightBuffer embed_tokens;  // [vocab_size, hidden]
    std::vector<DecoderLayerWeights> layers;
    ParamVector norm;  // [hidden], zero-centred final norm
    LinearWeight lm_head;     // [vocab_size, hidden]
    MtpWeights mtp;
    // The vision tower (model.visual.*), when the config has a vision_config and the checkpoint
    // its tensors; null for a text-only model. Shared: copies of the weights share one tower.
    std::shared_ptr<const VisionTower> visual;

    // Total bytes of weight storage.
    size_t storage_bytes() const;
};

struct LoadOptions {
    bool load_mtp = true;     // load mtp.* when present
    bool load_vision = true;  // load model.visual.* when present (and the config has a vision_config)
};

// Maps a checkpoint's tensors onto ModelWeights. Accepts the `model.language_model.` and
// `model.` prefixes, fused 3-D or per-expert MoE tensors, any float dtype per tensor; loads
// `model.visual.*` into `visual` (VisionTower) when the config has a vision_config and the
// checkpoint the tensors (a tower that is there but cannot be read is an error naming the tensor). Missing, mis-shaped and unexpected tensors are errors that name them.
Result<ModelWeights> load_model_weights(const std::shared_ptr<Checkpoint>& checkpoint,
                                        const ModelConfig& config, const LoadOptions& options = {});

// Opens DIR (config.json + safetensors) and loads it.
Result<ModelWeights> load_model_dir(const std::string& dir, const LoadOptions& options = {});

// Random weights with the config's shapes, stored as BF16 (A_log/norms as f32), deterministic
// by seed (each tensor's values depend only on the seed and its name), scaled so activations
// stay finite and O(1) through every layer of the real config. With format kFP8Block the linears
// that Qwen's FP8 checkpoints quantise (fp8_role kQuantized) are FP8 with F32 block scales: the
// same BF16 values quantised per tensor while they are made (no BF16 copy of the model is ever
// held), and the returned config carries the matching quantization_config. With kIntGroup the
// modules `qwenserve quantize --format int4-w4a16` quantises (low_bit_quantized) are INT4 W4A16 as
// it writes them (symmetric, group 128, bf16 scales; in_features must divide by 128), made the
// same way; with kNvfp4 the same modules are NVFP4 as `quantize --format nvfp4` writes them
// (compressed-tensors convention; a global scale per matrix from the values' bound). Multi-threaded.
ModelWeights make_dummy_weights(const ModelConfig& config, uint64_t seed, bool with_mtp = true,
                                WeightFormat format = WeightFormat::kDense);

// Weights with the config's layer structure (types, MTP presence) and no tensors: enough for
// Qwen36Model on NullOps (backend/null), which never reads a weight.
ModelWeights make_shape_only_weights(const ModelConfig& config, bool with_mtp);

// Every weight Qwen36Model's forward and MTP step pass to the ops, for Ops::prepare_weights:
// embed_tokens, then per layer its norms, attention linears and q/k norms or its GDN block, and
// its MoE block; the final norm, lm_head, then the MTP block's when present. Points into `w`,
// which must outlive the backend the set is prepared on, and numbers its views (writes their
// WeightHandles: backend/weight_handle.h), the same numbers every time for the same weights.
WeightSet weight_set(ModelWeights& w);

}  // namespace qs

// ModelConfig: the text model's hyper-parameters, read from a checkpoint's config.json
// (nested `qwen3_5_moe` with `text_config`, or flat `qwen3_5_moe_text`) and validated once.
// Field names follow config.json so code can be grepped against it. Spec: shared/spec/model.md §1.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "config/quantization_config.h"
#include "config/vision_config.h"
#include "core/status.h"

namespace qs {

enum class LayerType : uint8_t { kLinearAttention, kFullAttention };
// "linear_attention" / "full_attention", as in config.json.
const char* layer_type_name(LayerType t);

struct ModelConfig {
    std::string model_type;  // "qwen3_5_moe_text" after resolution of the nested layout
    int64_t hidden_size = 0;
    int64_t num_hidden_layers = 0;
    std::vector<LayerType> layer_types;  // resolved from layer_types or full_attention_interval
    int64_t full_attention_interval = 4;

    // Gated full attention.
    int64_t num_attention_heads = 0;
    int64_t num_key_value_heads = 0;
    int64_t head_dim = 0;
    bool attn_output_gate = true;
    bool attention_bias = false;

    // Gated DeltaNet.
    int64_t linear_num_key_heads = 0;
    int64_t linear_num_value_heads = 0;
    int64_t linear_key_head_dim = 0;
    int64_t linear_value_head_dim = 0;
    int64_t linear_conv_kernel_dim = 0;
    std::string mamba_ssm_dtype = "float32";

    // MoE.
    int64_t num_experts = 0;
    int64_t num_experts_per_tok = 0;
    int64_t moe_intermediate_size = 0;
    int64_t shared_expert_intermediate_size = 0;
    bool norm_topk_prob = true;

    int64_t vocab_size = 0;
    std::string hidden_act = "silu";
    double rms_norm_eps = 1e-6;
    int64_t max_position_embeddings = 0;
    bool tie_word_embeddings = false;

    // RoPE (text positions are 1-D; mrope sections only matter for images).
    std::string rope_type = "default";
    double rope_theta = 10000.0;
    double partial_rotary_factor = 0.25;  // transformers' qwen3_5_moe default when no file sets it
    std::vector<int64_t> mrope_section;
    bool mrope_interleaved = false;

    int64_t mtp_num_hidden_layers = 0;
    bool mtp_use_dedicated_embeddings = false;

    int64_t bos_token_id = -1;
    std::vector<int64_t> eos_token_ids;
    int64_t pad_token_id = -1;

    // The vision tower: the nested layout's `vision_config` (absent: a text-only model), and the
    // top-level image token ids (transformers' Qwen3_5MoeConfig defaults when absent).
    std::optional<VisionConfig> vision;
    int64_t image_token_id = 248056;
    int64_t video_token_id = 248057;
    int64_t vision_start_token_id = 248053;
    int64_t vision_end_token_id = 248054;

    std::string dtype = "bfloat16";  // checkpoint dtype as declared
    // `quantization_config` (top level, or inside text_config); kNone when absent.
    QuantizationConfig quantization;

    // Derived sizes (spec §1.2 "Derived sizes").
    int64_t rotary_dim() const { return int64_t(double(head_dim) * partial_rotary_factor); }
    int64_t linear_key_dim() const { return linear_num_key_heads * linear_key_head_dim; }      // Kdim
    int64_t linear_value_dim() const { return linear_num_value_heads * linear_value_head_dim; }// Vdim
    int64_t linear_conv_dim() const { return 2 * linear_key_dim() + linear_value_dim(); }     // Cdim
    int64_t q_proj_out() const { return num_attention_heads * head_dim * (attn_output_gate ? 2 : 1); }
    int64_t num_full_attention_layers() const;
    int64_t num_linear_attention_layers() const;
    bool is_full_attention(int64_t layer) const { return layer_types[size_t(layer)] == LayerType::kFullAttention; }

    // Checks every field and relation; the message names the field and the problem. A config
    // that transformers 5.17 loads is refused only where qwenserve cannot run it (another
    // model_type, a RoPE scaling, an activation or a layer type it does not implement, sizes it
    // cannot compute with). `warnings`, when given, gets one line per value that is accepted but
    // unusual or ignored (mrope_section, token ids outside the vocabulary).
    Status validate(std::vector<std::string>* warnings = nullptr) const;

    bool operator==(const ModelConfig&) const = default;
};

// Parses a config.json document (either layout) as transformers 5.17 reads it. Does not validate.
// Messages name the field with its path ("config.json: missing field text_config.hidden_size");
// the second form names `source` instead of "config.json".
//  - qwen3_5_moe / qwen3_5_moe_text: a field the file does not set takes Qwen3_5MoeTextConfig's
//    default (the 35B-A3B shapes, max_position_embeddings 32768); qwen3_next needs its fields.
//  - Fields transformers' model does not read are ignored as it ignores them, with a warning
//    when they ask for something else: attn_output_gate false (its attention always gates),
//    norm_topk_prob false for qwen3_5_moe (its router always renormalises), mamba_ssm_dtype,
//    and the MTP fields (transformers runs no MTP: a negative mtp_num_hidden_layers or
//    mtp_use_dedicated_embeddings true turns MTP off here).
//  - Legacy layer type names are mapped as transformers maps them (mamba, conv →
//    linear_attention; attention → full_attention).
//  - rms_norm_eps must be a JSON float, as transformers' strict dataclass requires.
// `warnings`, when given, gets one line per ignored field.
Result<ModelConfig> parse_model_config(const nlohmann::json& j);
Result<ModelConfig> parse_model_config(const nlohmann::json& j, const std::string& source,
                                       std::vector<std::string>* warnings = nullptr);
// Reads and parses a config.json file (or DIR/config.json), then validates; logs the warnings.
Result<ModelConfig> load_model_config(const std::string& path);

// The config as a nested-layout config.json document (model_type qwen3_5_moe, text_config);
// parse_model_config() of it gives back an equal struct. Used to write test checkpoints.
nlohmann::json model_config_to_json(const ModelConfig& c);

// The real Qwen3.6-35B-A3B text config (spec §1.2), eos_token_ids from generation_config.json.
ModelConfig qwen36_35b_a3b_config();
// The shape-faithful tiny config of spec §1.4.
ModelConfig tiny_model_config();

}  // namespace qs

// ModelConfig::validate() (every field and relation, one clear message per problem), the
// nested-layout writer model_config_to_json(), and the two presets (real 35B-A3B, tiny).
// Pure functions; called on the loading thread before anything is allocated from the config.
//
// The rules follow transformers 5.17 (tools/config_acceptance_fixture.py records what it loads;
// tests/unit/config_acceptance_test.cpp holds us to it): what it refuses is refused (layer_types
// of the wrong length; field types are checked by the parser), and what it loads is refused only
// when qwenserve cannot run it, each rule saying why: another model_type; sizes that are not
// positive or do not divide (no forward can be computed); a rotary dim that is not a whole even
// number <= head_dim (transformers would truncate it and then fail or rotate a different slice);
// rope_theta not positive (the frequencies are not finite); rms_norm_eps negative or not finite
// (NaN); a RoPE scaling type, activation or attention bias the forward does not implement.
// Values transformers only warns about, or ignores for text, are accepted with a warning.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cmath>
#include <nlohmann/json.hpp>

#include "config/model_config.h"

namespace qs {

const char* layer_type_name(LayerType t) {
    return t == LayerType::kFullAttention ? "full_attention" : "linear_attention";
}

Status ModelConfig::validate(std::vector<std::string>* warnings) const {
    auto warn = [&](std::string w) {
        if (warnings) warnings->push_back(std::move(w));
    };
    if (model_type != "qwen3_5_moe_text" && model_type != "qwen3_5_moe" &&
        model_type != "qwen3_next")
        return unsupported(
            fmt::format("model_type \"{}\" is not supported (expected qwen3_5_moe, "
                        "qwen3_5_moe_text or qwen3_next)",
                        model_type));

    const std::pair<const char*, int64_t> positive[] = {
        {"hidden_size", hidden_size},
        {"num_hidden_layers", num_hidden_layers},
        {"num_attention_heads", num_attention_heads},
        {"num_key_value_heads", num_key_value_heads},
        {"head_dim", head_dim},
        {"linear_num_key_heads", linear_num_key_heads},
        {"linear_num_value_heads", linear_num_value_heads},
        {"linear_key_head_dim", linear_key_head_dim},
        {"linear_value_head_dim", linear_value_head_dim},
        {"linear_conv_kernel_dim", linear_conv_kernel_dim},
        {"num_experts", num_experts},
        {"num_experts_per_tok", num_experts_per_tok},
        {"moe_intermediate_size", moe_intermediate_size},
        {"shared_expert_intermediate_size", shared_expert_intermediate_size},
        {"vocab_size", vocab_size},
        {"max_position_embeddings", max_position_embeddings},
    };
    for (const auto& [name, value] : positive)
        if (value <= 0)
            return corrupt_data(fmt::format("{} must be positive (got {})", name, value));
    if (!(rms_norm_eps >= 0) || !std::isfinite(rms_norm_eps))
        return corrupt_data(fmt::format("rms_norm_eps must be >= 0 and finite (got {})", rms_norm_eps));
    if (!(rope_theta > 0) || !std::isfinite(rope_theta))
        return corrupt_data(fmt::format("rope_theta must be positive (got {})", rope_theta));

    if (int64_t(layer_types.size()) != num_hidden_layers)
        return corrupt_data(fmt::format("layer_types has {} entries but num_hidden_layers is {}",
                                        layer_types.size(), num_hidden_layers));
    if (num_attention_heads % num_key_value_heads != 0)
        return corrupt_data(
            fmt::format("num_attention_heads ({}) is not a multiple of num_key_value_heads ({})",
                        num_attention_heads, num_key_value_heads));
    if (linear_num_value_heads % linear_num_key_heads != 0)
        return corrupt_data(fmt::format(
            "linear_num_value_heads ({}) is not a multiple of linear_num_key_heads ({})",
            linear_num_value_heads, linear_num_key_heads));
    if (num_experts_per_tok > num_experts)
        return corrupt_data(fmt::format("num_experts_per_tok ({}) exceeds num_experts ({})",
                                        num_experts_per_tok, num_experts));

    // Rotary dims: head_dim * partial_rotary_factor must be a whole, even number ≤ head_dim.
    if (!(partial_rotary_factor > 0) || !std::isfinite(partial_rotary_factor))
        return corrupt_data(
            fmt::format("partial_rotary_factor must be positive (got {})", partial_rotary_factor));
    double rot = double(head_dim) * partial_rotary_factor;
    if (rot > double(head_dim))
        return corrupt_data(
            fmt::format("rotary dim ({}) exceeds head_dim ({}): partial_rotary_factor is {}", rot,
                        head_dim, partial_rotary_factor));
    if (rot != std::floor(rot))
        return corrupt_data(fmt::format(
            "rotary dim head_dim * partial_rotary_factor = {} * {} = {} is not an integer",
            head_dim, partial_rotary_factor, rot));
    if (rotary_dim() % 2 != 0)
        return corrupt_data(fmt::format("rotary dim ({}) must be even", rotary_dim()));
    // M-RoPE sections only split the frequencies among the temporal/height/width position axes;
    // text positions are equal on all three, so any sections give the same rotation.
    // transformers does not validate them (interleaved M-RoPE leaves the rest to the temporal
    // section); neither do we, but an unusual value is worth a line in the log.
    if (!mrope_section.empty()) {
        int64_t sum = 0;
        bool negative = false;
        for (int64_t s : mrope_section) {
            negative |= s < 0;
            sum += s;
        }
        if (negative || sum != rotary_dim() / 2 || mrope_section.size() != 3)
            warn(fmt::format("mrope_section {} (sum {}, rotary_dim/2 {}) is not a split of the rotary "
                             "frequencies; it is ignored: text positions do not depend on it",
                             mrope_section, sum, rotary_dim() / 2));
    }
    if (rope_type != "default" && rope_type != "mrope")
        return unsupported(fmt::format(
            "rope_type \"{}\" is unsupported (only default RoPE is implemented, no scaling)", rope_type));

    if (hidden_act != "silu")
        return unsupported(fmt::format("hidden_act \"{}\" is unsupported (only silu)", hidden_act));
    if (!attn_output_gate)  // the parser follows transformers and never gives false
        return unsupported("attn_output_gate false is unsupported (the attention always has its output gate)");
    if (attention_bias)
        return unsupported("attention_bias true is unsupported (the model has no biases)");
    if (mtp_num_hidden_layers < 0)
        return corrupt_data(fmt::format("mtp_num_hidden_layers must not be negative (got {})",
                                        mtp_num_hidden_layers));
    if (mtp_use_dedicated_embeddings)
        return unsupported(
            "mtp_use_dedicated_embeddings true is unsupported (MTP shares embed_tokens)");

    // transformers only warns about special tokens outside the vocabulary (several Hub configs
    // store pad_token_id -1); so do we. An EOS id that is never produced never stops a sequence.
    auto check_token = [&](const char* name, int64_t id, bool allow_absent) {
        if (allow_absent && id == -1) return;
        if (id < 0 || id >= vocab_size)
            warn(fmt::format("{} {} is outside the vocabulary (vocab_size {}): it is never produced", name, id,
                             vocab_size));
    };
    check_token("bos_token_id", bos_token_id, true);
    check_token("pad_token_id", pad_token_id, true);
    for (int64_t id : eos_token_ids) check_token("eos_token_id", id, false);
    return Status::ok();
}

nlohmann::json model_config_to_json(const ModelConfig& c) {
    using json = nlohmann::json;
    json lt = json::array();
    for (LayerType t : c.layer_types) lt.push_back(layer_type_name(t));
    json rope = {{"rope_type", c.rope_type},
                 {"rope_theta", c.rope_theta},
                 {"partial_rotary_factor", c.partial_rotary_factor},
                 {"mrope_interleaved", c.mrope_interleaved}};
    if (!c.mrope_section.empty()) rope["mrope_section"] = c.mrope_section;
    json t = {{"model_type", c.model_type},
              {"hidden_size", c.hidden_size},
              {"num_hidden_layers", c.num_hidden_layers},
              {"layer_types", lt},
              {"full_attention_interval", c.full_attention_interval},
              {"num_attention_heads", c.num_attention_heads},
              {"num_key_value_heads", c.num_key_value_heads},
              {"head_dim", c.head_dim},
              {"attn_output_gate", c.attn_output_gate},
              {"attention_bias", c.attention_bias},
              {"linear_num_key_heads", c.linear_num_key_heads},
              {"linear_num_value_heads", c.linear_num_value_heads},
              {"linear_key_head_dim", c.linear_key_head_dim},
              {"linear_value_head_dim", c.linear_value_head_dim},
              {"linear_conv_kernel_dim", c.linear_conv_kernel_dim},
              {"mamba_ssm_dtype", c.mamba_ssm_dtype},
              {"num_experts", c.num_experts},
              {"num_experts_per_tok", c.num_experts_per_tok},
              {"moe_intermediate_size", c.moe_intermediate_size},
              {"shared_expert_intermediate_size", c.shared_expert_intermediate_size},
              {"norm_topk_prob", c.norm_topk_prob},
              {"vocab_size", c.vocab_size},
              {"hidden_act", c.hidden_act},
              {"rms_norm_eps", c.rms_norm_eps},
              {"max_position_embeddings", c.max_position_embeddings},
              {"tie_word_embeddings", c.tie_word_embeddings},
              {"rope_parameters", rope},
              {"mtp_num_hidden_layers", c.mtp_num_hidden_layers},
              {"mtp_use_dedicated_embeddings", c.mtp_use_dedicated_embeddings},
              {"dtype", c.dtype}};
    if (c.bos_token_id >= 0) t["bos_token_id"] = c.bos_token_id;
    if (c.pad_token_id >= 0) t["pad_token_id"] = c.pad_token_id;
    if (c.eos_token_ids.size() == 1) t["eos_token_id"] = c.eos_token_ids[0];
    if (c.eos_token_ids.size() > 1) t["eos_token_id"] = c.eos_token_ids;
    json top = {{"architectures", {"Qwen3_5MoeForConditionalGeneration"}},
                {"model_type", "qwen3_5_moe"},
                {"tie_word_embeddings", c.tie_word_embeddings},
                {"text_config", t}};
    if (c.quantization.quantized()) top["quantization_config"] = quantization_config_to_json(c.quantization);
    if (c.vision) {
        const VisionConfig& v = *c.vision;
        top["vision_config"] = {{"model_type", "qwen3_5_moe_vision"},
                                {"depth", v.depth},
                                {"hidden_size", v.hidden_size},
                                {"intermediate_size", v.intermediate_size},
                                {"num_heads", v.num_heads},
                                {"in_channels", v.in_channels},
                                {"patch_size", v.patch_size},
                                {"spatial_merge_size", v.spatial_merge_size},
                                {"temporal_patch_size", v.temporal_patch_size},
                                {"out_hidden_size", v.out_hidden_size},
                                {"num_position_embeddings", v.num_position_embeddings},
                                {"hidden_act", v.hidden_act},
                                {"rope_parameters", {{"rope_type", "axial"}, {"rope_theta", v.rope_theta}}}};
        top["image_token_id"] = c.image_token_id;
        top["video_token_id"] = c.video_token_id;
        top["vision_start_token_id"] = c.vision_start_token_id;
        top["vision_end_token_id"] = c.vision_end_token_id;
    }
    return top;
}

ModelConfig qwen36_35b_a3b_config() {
    ModelConfig c;
    c.model_type = "qwen3_5_moe_text";
    c.hidden_size = 2048;
    c.num_hidden_layers = 40;
    c.full_attention_interval = 4;
    for (int64_t i = 0; i < 40; ++i)
        c.layer_types.push_back(i % 4 == 3 ? LayerType::kFullAttention
                                           : LayerType::kLinearAttention);
    c.num_attention_heads = 16;
    c.num_key_value_heads = 2;
    c.head_dim = 256;
    c.attn_output_gate = true;
    c.attention_bias = false;
    c.linear_num_key_heads = 16;
    c.linear_num_value_heads = 32;
    c.linear_key_head_dim = 128;
    c.linear_value_head_dim = 128;
    c.linear_conv_kernel_dim = 4;
    c.mamba_ssm_dtype = "float32";
    c.num_experts = 256;
    c.num_experts_per_tok = 8;
    c.moe_intermediate_size = 512;
    c.shared_expert_intermediate_size = 512;
    c.norm_topk_prob = true;
    c.vocab_size = 248320;
    c.hidden_act = "silu";
    c.rms_norm_eps = 1e-6;
    c.max_position_embeddings = 262144;
    c.tie_word_embeddings = false;
    c.rope_type = "default";
    c.rope_theta = 10000000.0;
    c.partial_rotary_factor = 0.25;
    c.mrope_section = {11, 11, 10};
    c.mrope_interleaved = true;
    c.mtp_num_hidden_layers = 1;
    c.mtp_use_dedicated_embeddings = false;
    c.bos_token_id = 248044;
    c.eos_token_ids = {248046, 248044};  // generation_config.json; config.json lists only 248044
    c.pad_token_id = -1;
    c.dtype = "bfloat16";
    // The release's tower (spec §1.3): transformers' defaults but out_hidden_size, which the
    // checkpoint sets to the text model's width. Dummy weights make it only with --dummy-vision.
    c.vision = VisionConfig{};
    c.vision->out_hidden_size = 2048;
    return c;
}

ModelConfig tiny_model_config() {
    ModelConfig c;
    c.model_type = "qwen3_5_moe_text";
    c.hidden_size = 64;
    c.num_hidden_layers = 4;
    c.full_attention_interval = 4;
    c.layer_types = {LayerType::kLinearAttention, LayerType::kLinearAttention,
                     LayerType::kLinearAttention, LayerType::kFullAttention};
    c.num_attention_heads = 4;
    c.num_key_value_heads = 2;
    c.head_dim = 32;
    c.attn_output_gate = true;
    c.linear_num_key_heads = 2;
    c.linear_num_value_heads = 4;
    c.linear_key_head_dim = 16;
    c.linear_value_head_dim = 16;
    c.linear_conv_kernel_dim = 4;
    c.mamba_ssm_dtype = "float32";
    c.num_experts = 8;
    c.num_experts_per_tok = 2;
    c.moe_intermediate_size = 32;
    c.shared_expert_intermediate_size = 32;
    c.vocab_size = 512;
    c.hidden_act = "silu";
    c.rms_norm_eps = 1e-6;
    c.max_position_embeddings = 4096;
    c.tie_word_embeddings = false;
    c.rope_type = "default";
    c.rope_theta = 10000000.0;
    c.partial_rotary_factor = 0.25;
    c.mrope_section = {2, 1, 1};
    c.mrope_interleaved = true;
    c.mtp_num_hidden_layers = 1;
    c.mtp_use_dedicated_embeddings = false;
    return c;
}

}  // namespace qs

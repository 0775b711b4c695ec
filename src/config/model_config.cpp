// ModelConfig parsing (config.json → struct) and validation. Runs once at startup on the loading
// thread; the result is immutable afterwards. Accepts the nested `qwen3_5_moe` layout (text
// parameters under `text_config`) and the flat `qwen3_5_moe_text` / `qwen3_next` layouts.
//
// Where a key may sit in several places, the lookup order is fixed and documented here:
//   partial_rotary_factor, rope_theta, rope_type, mrope_*:
//       text.rope_parameters → text.rope_scaling → text → top.rope_parameters → top
//   tie_word_embeddings, bos/eos/pad_token_id, dtype (or torch_dtype): text → top
//   vision_config, image_token_id, video_token_id, vision_start/end_token_id: top (nested layout only)
// ("text" is text_config in the nested layout and the file's top level in the flat one.)
#include "config/model_config.h"

#include <fmt/format.h>

#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/log.h"
#include "core/read_file.h"

namespace qs {
namespace {

using json = nlohmann::json;

// Reads fields from one JSON object and turns type errors into Status messages that name the
// field with its path ("config.json: text_config.hidden_size must be an integer").
class FieldReader {
public:
    FieldReader(const json& obj, std::string source, std::string prefix)
        : obj_(obj), source_(std::move(source)), prefix_(std::move(prefix)) {}

    const json* get(const char* key) const {
        auto it = obj_.find(key);
        if (it == obj_.end() || it->is_null()) return nullptr;
        return &*it;
    }
    std::string field(const std::string& key) const { return prefix_ + key; }
    Status missing(const char* key) const {
        return corrupt_data(fmt::format("{}: missing field {}", source_, field(key)));
    }
    Status bad_type(const std::string& key, const char* expected) const {
        return corrupt_data(fmt::format("{}: {} must be {}", source_, field(key), expected));
    }

    // An integer field; `required` fields must be present, others keep *out unchanged.
    Status read_int(const char* key, int64_t* out, bool required) const {
        const json* v = get(key);
        if (!v) return required ? missing(key) : Status::ok();
        return to_int(*v, key, out);
    }
    Status to_int(const json& v, const std::string& key, int64_t* out) const {
        if (v.is_number_unsigned()) {
            uint64_t u = v.get<uint64_t>();
            if (u > uint64_t(std::numeric_limits<int64_t>::max()))
                return bad_type(key, "an integer below 2^63");
            *out = int64_t(u);
            return Status::ok();
        }
        if (!v.is_number_integer()) return bad_type(key, "an integer");
        *out = v.get<int64_t>();
        return Status::ok();
    }
    Status read_double(const char* key, double* out, bool required) const {
        const json* v = get(key);
        if (!v) return required ? missing(key) : Status::ok();
        if (!v->is_number()) return bad_type(key, "a number");
        *out = v->get<double>();
        return Status::ok();
    }
    Status read_bool(const char* key, bool* out) const {
        const json* v = get(key);
        if (!v) return Status::ok();
        if (!v->is_boolean()) return bad_type(key, "true or false");
        *out = v->get<bool>();
        return Status::ok();
    }
    Status read_string(const char* key, std::string* out, bool required) const {
        const json* v = get(key);
        if (!v) return required ? missing(key) : Status::ok();
        if (!v->is_string()) return bad_type(key, "a string");
        *out = v->get<std::string>();
        return Status::ok();
    }
    // An int or a list of ints (eos_token_id). Returns true in *found when present.
    Status read_int_list(const char* key, std::vector<int64_t>* out, bool* found) const {
        const json* v = get(key);
        *found = v != nullptr;
        if (!v) return Status::ok();
        out->clear();
        if (!v->is_array()) {
            int64_t x = 0;
            QS_RETURN_IF_ERROR(to_int(*v, key, &x));
            out->push_back(x);
            return Status::ok();
        }
        for (size_t i = 0; i < v->size(); ++i) {
            int64_t x = 0;
            QS_RETURN_IF_ERROR(to_int((*v)[i], fmt::format("{}[{}]", key, i), &x));
            out->push_back(x);
        }
        return Status::ok();
    }

    const json& obj() const { return obj_; }
    const std::string& prefix() const { return prefix_; }

private:
    const json& obj_;
    std::string source_;
    std::string prefix_;
};

// The first reader in `readers` that has `key` (non-null), or nullptr.
const FieldReader* first_with(const std::vector<const FieldReader*>& readers, const char* key) {
    for (const FieldReader* r : readers)
        if (r->get(key)) return r;
    return nullptr;
}

// Qwen3_5MoeTextConfig's field defaults in transformers 5.17: what it uses for a field the file
// does not set (the 35B-A3B shapes; max_position_embeddings 32768; rope_theta 10000).
void apply_transformers_defaults(ModelConfig* c) {
    c->vocab_size = 248320;
    c->hidden_size = 2048;
    c->num_hidden_layers = 40;
    c->num_attention_heads = 16;
    c->num_key_value_heads = 2;
    c->head_dim = 256;
    c->max_position_embeddings = 32768;
    c->linear_conv_kernel_dim = 4;
    c->linear_key_head_dim = 128;
    c->linear_value_head_dim = 128;
    c->linear_num_key_heads = 16;
    c->linear_num_value_heads = 32;
    c->moe_intermediate_size = 512;
    c->shared_expert_intermediate_size = 512;
    c->num_experts_per_tok = 8;
    c->num_experts = 256;
}

Status parse_layer_types(const FieldReader& text, ModelConfig* c) {
    const json* lt = text.get("layer_types");
    if (!lt) {
        // Derived as transformers derives it: layer i is full attention iff
        // (i + 1) % full_attention_interval == 0 (Python's modulo: a negative interval acts as its
        // magnitude; 0 is its ZeroDivisionError). The interval is not read when layer_types is
        // given. An invalid layer count leaves the list empty; validate() then names the field.
        if (c->full_attention_interval == 0)
            return corrupt_data(fmt::format("config.json: {} is 0 and {} is absent: the layer types cannot be derived",
                                            text.field("full_attention_interval"), text.field("layer_types")));
        if (c->num_hidden_layers <= 0) return Status::ok();
        const int64_t interval =
            c->full_attention_interval < 0 ? -c->full_attention_interval : c->full_attention_interval;
        for (int64_t i = 0; i < c->num_hidden_layers; ++i)
            c->layer_types.push_back((i + 1) % interval == 0
                                         ? LayerType::kFullAttention
                                         : LayerType::kLinearAttention);
        return Status::ok();
    }
    if (!lt->is_array()) return text.bad_type("layer_types", "a list of strings");
    for (size_t i = 0; i < lt->size(); ++i) {
        const json& e = (*lt)[i];
        if (!e.is_string()) return text.bad_type(fmt::format("layer_types[{}]", i), "a string");
        const std::string& s = e.get_ref<const std::string&>();
        // transformers' remap_legacy_layer_types: mamba, conv → linear; attention → full.
        if (s == "linear_attention" || s == "mamba" || s == "conv") {
            c->layer_types.push_back(LayerType::kLinearAttention);
        } else if (s == "full_attention" || s == "attention") {
            c->layer_types.push_back(LayerType::kFullAttention);
        } else {
            return corrupt_data(
                fmt::format("config.json: {}[{}] is the layer type \"{}\", which qwenserve cannot run "
                            "(expected linear_attention or full_attention)",
                            text.field("layer_types"), i, s));
        }
    }
    return Status::ok();
}

// RoPE keys: see the lookup order in the file comment.
Status parse_rope(const FieldReader& text, const FieldReader& top, ModelConfig* c) {
    std::vector<FieldReader> owned;
    owned.reserve(4);
    auto add_sub = [&](const FieldReader& parent, const char* key) -> Status {
        const json* v = parent.get(key);
        if (!v) return Status::ok();
        if (!v->is_object()) return parent.bad_type(key, "an object");
        owned.emplace_back(*v, "config.json", parent.field(key) + ".");
        return Status::ok();
    };
    QS_RETURN_IF_ERROR(add_sub(text, "rope_parameters"));
    QS_RETURN_IF_ERROR(add_sub(text, "rope_scaling"));
    size_t num_text_subs = owned.size();
    if (&top.obj() != &text.obj()) QS_RETURN_IF_ERROR(add_sub(top, "rope_parameters"));

    std::vector<const FieldReader*> order;
    for (size_t i = 0; i < num_text_subs; ++i) order.push_back(&owned[i]);
    order.push_back(&text);
    for (size_t i = num_text_subs; i < owned.size(); ++i) order.push_back(&owned[i]);
    if (&top.obj() != &text.obj()) order.push_back(&top);

    if (const FieldReader* r = first_with(order, "partial_rotary_factor"))
        QS_RETURN_IF_ERROR(
            r->read_double("partial_rotary_factor", &c->partial_rotary_factor, false));
    if (const FieldReader* r = first_with(order, "rope_theta"))
        QS_RETURN_IF_ERROR(r->read_double("rope_theta", &c->rope_theta, false));
    if (const FieldReader* r = first_with(order, "rope_type")) {
        QS_RETURN_IF_ERROR(r->read_string("rope_type", &c->rope_type, false));
    } else if (const FieldReader* r2 = first_with(order, "type")) {  // older rope_scaling spelling
        if (&r2->obj() != &text.obj() && &r2->obj() != &top.obj())
            QS_RETURN_IF_ERROR(r2->read_string("type", &c->rope_type, false));
    }
    if (const FieldReader* r = first_with(order, "mrope_section")) {
        bool found = false;
        QS_RETURN_IF_ERROR(r->read_int_list("mrope_section", &c->mrope_section, &found));
    }
    if (const FieldReader* r = first_with(order, "mrope_interleaved"))
        QS_RETURN_IF_ERROR(r->read_bool("mrope_interleaved", &c->mrope_interleaved));
    return Status::ok();
}

}  // namespace

int64_t ModelConfig::num_full_attention_layers() const {
    int64_t n = 0;
    for (LayerType t : layer_types) n += t == LayerType::kFullAttention;
    return n;
}

int64_t ModelConfig::num_linear_attention_layers() const {
    return int64_t(layer_types.size()) - num_full_attention_layers();
}

Result<ModelConfig> parse_model_config(const nlohmann::json& j) {
    return parse_model_config(j, "config.json");
}

Result<ModelConfig> parse_model_config(const nlohmann::json& j, const std::string& source,
                                       std::vector<std::string>* warnings) {
    Result<ModelConfig> r = [&]() -> Result<ModelConfig> {
        if (!j.is_object()) return corrupt_data("config.json: the document is not a JSON object");
        ModelConfig c;
        FieldReader top(j, "config.json", "");
        std::string top_type;
        QS_RETURN_IF_ERROR(top.read_string("model_type", &top_type, true));

        // Nested layout when the file says so or carries a text_config; flat otherwise.
        const json* tc = top.get("text_config");
        bool nested = top_type == "qwen3_5_moe" || tc != nullptr;
        if (nested && !tc) return top.missing("text_config");
        if (nested && !tc->is_object()) return top.bad_type("text_config", "an object");
        FieldReader text(nested ? *tc : j, "config.json", nested ? "text_config." : "");
        c.model_type = top_type;
        if (top_type == "qwen3_5_moe") {
            c.model_type = "qwen3_5_moe_text";
            QS_RETURN_IF_ERROR(text.read_string("model_type", &c.model_type, false));
        }

        // Fields transformers gives a default to are optional where its defaults are known.
        const bool hf_defaults = c.model_type == "qwen3_5_moe_text";
        const bool required = !hf_defaults;
        if (hf_defaults) apply_transformers_defaults(&c);
        QS_RETURN_IF_ERROR(text.read_int("hidden_size", &c.hidden_size, required));
        QS_RETURN_IF_ERROR(text.read_int("num_hidden_layers", &c.num_hidden_layers, required));
        QS_RETURN_IF_ERROR(
            text.read_int("full_attention_interval", &c.full_attention_interval, false));
        QS_RETURN_IF_ERROR(text.read_int("num_attention_heads", &c.num_attention_heads, required));
        QS_RETURN_IF_ERROR(text.read_int("num_key_value_heads", &c.num_key_value_heads, required));
        QS_RETURN_IF_ERROR(text.read_int("head_dim", &c.head_dim, required));
        QS_RETURN_IF_ERROR(text.read_bool("attn_output_gate", &c.attn_output_gate));
        QS_RETURN_IF_ERROR(text.read_bool("attention_bias", &c.attention_bias));
        QS_RETURN_IF_ERROR(text.read_int("linear_num_key_heads", &c.linear_num_key_heads, required));
        QS_RETURN_IF_ERROR(
            text.read_int("linear_num_value_heads", &c.linear_num_value_heads, required));
        QS_RETURN_IF_ERROR(text.read_int("linear_key_head_dim", &c.linear_key_head_dim, required));
        QS_RETURN_IF_ERROR(text.read_int("linear_value_head_dim", &c.linear_value_head_dim, required));
        QS_RETURN_IF_ERROR(
            text.read_int("linear_conv_kernel_dim", &c.linear_conv_kernel_dim, required));
        QS_RETURN_IF_ERROR(text.read_string("mamba_ssm_dtype", &c.mamba_ssm_dtype, false));
        QS_RETURN_IF_ERROR(text.read_int("num_experts", &c.num_experts, required));
        QS_RETURN_IF_ERROR(text.read_int("num_experts_per_tok", &c.num_experts_per_tok, required));
        QS_RETURN_IF_ERROR(text.read_int("moe_intermediate_size", &c.moe_intermediate_size, required));
        QS_RETURN_IF_ERROR(text.read_int("shared_expert_intermediate_size",
                                         &c.shared_expert_intermediate_size, required));
        QS_RETURN_IF_ERROR(text.read_bool("norm_topk_prob", &c.norm_topk_prob));
        QS_RETURN_IF_ERROR(text.read_int("vocab_size", &c.vocab_size, required));
        QS_RETURN_IF_ERROR(text.read_string("hidden_act", &c.hidden_act, false));
        QS_RETURN_IF_ERROR(text.read_double("rms_norm_eps", &c.rms_norm_eps, false));
        if (const json* eps = text.get("rms_norm_eps"); eps && !eps->is_number_float())
            return text.bad_type("rms_norm_eps", "a floating-point number such as 1e-06 (transformers 5.17 refuses an "
                                                 "integer here)");
        QS_RETURN_IF_ERROR(
            text.read_int("max_position_embeddings", &c.max_position_embeddings, required));
        QS_RETURN_IF_ERROR(text.read_int("mtp_num_hidden_layers", &c.mtp_num_hidden_layers, false));
        QS_RETURN_IF_ERROR(
            text.read_bool("mtp_use_dedicated_embeddings", &c.mtp_use_dedicated_embeddings));

        // Fields transformers reads differently or not at all: follow it, and say so.
        auto warn = [&](std::string w) {
            if (warnings) warnings->push_back(fmt::format("{}: {}", source, std::move(w)));
        };
        if (!c.attn_output_gate) {
            warn(text.field("attn_output_gate") +
                 " false is ignored: transformers' attention always has the output gate");
            c.attn_output_gate = true;
        }
        if (!c.norm_topk_prob && hf_defaults) {
            warn(text.field("norm_topk_prob") +
                 " false is ignored: transformers' qwen3_5_moe router always renormalises the top-k weights");
            c.norm_topk_prob = true;
        }
        if (c.mamba_ssm_dtype != "float32" && c.mamba_ssm_dtype != "bfloat16" && c.mamba_ssm_dtype != "float16")
            warn(fmt::format("{} \"{}\" is ignored (transformers does not read it; the GDN state dtype is "
                             "--gdn-state-dtype)",
                             text.field("mamba_ssm_dtype"), c.mamba_ssm_dtype));
        if (c.mtp_num_hidden_layers < 0) {
            warn(fmt::format("{} {} is negative: no MTP layer", text.field("mtp_num_hidden_layers"),
                             c.mtp_num_hidden_layers));
            c.mtp_num_hidden_layers = 0;
        }
        if (c.mtp_use_dedicated_embeddings) {
            warn(text.field("mtp_use_dedicated_embeddings") +
                 " true is unsupported (MTP shares embed_tokens here): MTP is off, the model runs without it");
            c.mtp_use_dedicated_embeddings = false;
            c.mtp_num_hidden_layers = 0;
        }

        // Every layer must be MoE: dense-MLP layers are not part of this model family, and the
        // struct has no place for them, so refuse rather than load a wrong model.
        if (const json* m = text.get("mlp_only_layers")) {
            if (!m->is_array()) return text.bad_type("mlp_only_layers", "a list");
            if (!m->empty())
                return unsupported(
                    fmt::format("config.json: {} is not empty; dense MLP layers are unsupported",
                                text.field("mlp_only_layers")));
        }
        int64_t sparse_step = 1;
        QS_RETURN_IF_ERROR(text.read_int("decoder_sparse_step", &sparse_step, false));
        if (sparse_step != 1)
            return unsupported(
                fmt::format("config.json: {} is {}; only 1 (every layer MoE) is supported",
                            text.field("decoder_sparse_step"), sparse_step));

        QS_RETURN_IF_ERROR(parse_layer_types(text, &c));
        QS_RETURN_IF_ERROR(parse_rope(text, top, &c));

        const std::vector<const FieldReader*> text_then_top = {&text, &top};
        if (const FieldReader* f = first_with(text_then_top, "tie_word_embeddings"))
            QS_RETURN_IF_ERROR(f->read_bool("tie_word_embeddings", &c.tie_word_embeddings));
        if (const FieldReader* f = first_with(text_then_top, "bos_token_id"))
            QS_RETURN_IF_ERROR(f->read_int("bos_token_id", &c.bos_token_id, false));
        if (const FieldReader* f = first_with(text_then_top, "pad_token_id"))
            QS_RETURN_IF_ERROR(f->read_int("pad_token_id", &c.pad_token_id, false));
        if (const FieldReader* f = first_with(text_then_top, "eos_token_id")) {
            bool found = false;
            QS_RETURN_IF_ERROR(f->read_int_list("eos_token_id", &c.eos_token_ids, &found));
        }
        if (const FieldReader* f = first_with(text_then_top, "dtype")) {
            QS_RETURN_IF_ERROR(f->read_string("dtype", &c.dtype, false));
        } else if (const FieldReader* f2 = first_with(text_then_top, "torch_dtype")) {
            QS_RETURN_IF_ERROR(f2->read_string("torch_dtype", &c.dtype, false));
        }
        for (const FieldReader* f : text_then_top) {
            const json* q = f->get("quantization_config");
            if (!q) continue;
            QS_ASSIGN_OR_RETURN(c.quantization,
                                parse_quantization_config(*q, "config.json: " + f->field("quantization_config")));
            break;
        }
        // The vision tower and its token ids: the nested layout only (a flat text config has none).
        if (const json* v = nested ? top.get("vision_config") : nullptr) {
            // A tower qwenserve cannot run leaves the text model usable: warn, no image input.
            Result<VisionConfig> vc = parse_vision_config(*v);
            if (vc.is_ok()) {
                c.vision = vc.value();
            } else if (warnings) {
                warnings->push_back(fmt::format("{}: {}; image input is off", source, vc.status().message()));
            }
            QS_RETURN_IF_ERROR(top.read_int("image_token_id", &c.image_token_id, false));
            QS_RETURN_IF_ERROR(top.read_int("video_token_id", &c.video_token_id, false));
            QS_RETURN_IF_ERROR(top.read_int("vision_start_token_id", &c.vision_start_token_id, false));
            QS_RETURN_IF_ERROR(top.read_int("vision_end_token_id", &c.vision_end_token_id, false));
        }
        return c;
    }();
    if (r.is_ok() || source == "config.json") return r;
    // Messages are built against "config.json"; name the real file instead.
    std::string msg = r.status().message();
    if (msg.rfind("config.json: ", 0) == 0) msg = source + msg.substr(11);
    return Status(r.status().kind(), msg);
}

Result<ModelConfig> load_model_config(const std::string& path) {
    std::error_code ec;
    std::string file = path;
    if (std::filesystem::is_directory(path, ec))
        file = (std::filesystem::path(path) / "config.json").string();
    auto text = read_file(file);
    if (!text.is_ok()) return text.status().with_context("model config");
    json j = json::parse(text.value(), nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded()) return corrupt_data(fmt::format("{}: not valid JSON", file));
    std::vector<std::string> warnings;
    QS_ASSIGN_OR_RETURN(ModelConfig c, parse_model_config(j, file, &warnings));
    QS_RETURN_IF_ERROR(c.validate(&warnings).with_context(file));
    for (const std::string& w : warnings) log_warn("{}", w);
    return c;
}

}  // namespace qs

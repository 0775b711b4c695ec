// Checkpoint → ModelWeights: name mapping, layout detection and shape checks (see weights.h).
// Every tensor the model needs is looked up by name; each use is recorded so that tensors nobody
// asked for are reported as unexpected. Errors are collected so one run names every problem.
#include <fmt/format.h>

#include <cmath>
#include <functional>
#include <set>

#include "core/log.h"
#include "io/checkpoint.h"
#include "model/fp8_block.h"
#include "model/tensor_source.h"
#include "model/weights.h"

namespace qs {

namespace {

using detail::Kind;
using detail::TensorSource;
using detail::module_of;
using detail::scale_name_of;

// A fused 3-D expert tensor [E, rows, cols], dense or FP8 with its scales.
struct Fused {
    bool fp8 = false;
    int64_t rows = 0, cols = 0;
    WeightBuffer weight, scale_inv;

    // The linear [out, in] of expert e starting `offset` elements (and `scale_offset` scales)
    // into that expert's matrix.
    LinearWeight part(int64_t e, int64_t offset, int64_t out, int64_t in, int64_t scale_offset) const {
        LinearWeight w;
        w.format = fp8 ? WeightFormat::kFP8Block : WeightFormat::kDense;
        w.out_features = out;
        w.in_features = in;
        if (weight.data) w.weight = weight.slice(e * rows * cols + offset, {out, in});
        if (fp8 && scale_inv.data)
            w.scale_inv = scale_inv.slice(e * fp8_num_blocks(rows) * fp8_num_blocks(cols) + scale_offset,
                                          {fp8_num_blocks(out), fp8_num_blocks(in)});
        return w;
    }
};

Fused load_fused(TensorSource& src, const std::string& name, int64_t E, int64_t rows, int64_t cols) {
    Fused f;
    f.rows = rows;
    f.cols = cols;
    if (src.is_fp8(name)) {
        if (!src.fp8_allowed(name)) {
            src.mark_used(name);
            src.mark_used(scale_name_of(name));
            return f;
        }
        f.fp8 = true;
        f.weight = src.get(name, {E, rows, cols}, Kind::kFp8);
        f.scale_inv = src.scales(name, E, rows, cols);
    } else {
        f.weight = src.get(name, {E, rows, cols});
        src.stray_scale(name);
    }
    return f;
}

void load_moe(TensorSource& src, const std::string& p, const ModelConfig& c, MoeWeights& moe) {
    const int64_t H = c.hidden_size, E = c.num_experts, I = c.moe_intermediate_size;
    moe.router = src.linear(p + "mlp.gate.weight", E, H);
    moe.experts.resize(static_cast<size_t>(E));
    if (src.has(p + "mlp.experts.gate_up_proj")) {
        // Fused layout: gate_up_proj [E, 2I, H] (rows 0..I-1 gate, I..2I-1 up), down_proj [E, H, I];
        // FP8: each with `<name>_scale_inv` [E, ⌈rows/128⌉, ⌈cols/128⌉].
        Fused gate_up = load_fused(src, p + "mlp.experts.gate_up_proj", E, 2 * I, H);
        const Fused down = load_fused(src, p + "mlp.experts.down_proj", E, H, I);
        if (gate_up.fp8 && I % kFp8BlockSize != 0) {
            gate_up.scale_inv = {};
            src.problem(fmt::format("tensor {}mlp.experts.gate_up_proj is F8_E4M3 but moe_intermediate_size {} is not "
                                    "a multiple of 128, so gate and up share scale blocks (store experts per expert)",
                                    p, I));
        }
        const int64_t gate_blocks = fp8_num_blocks(I) * fp8_num_blocks(H);
        for (int64_t e = 0; e < E; ++e) {
            ExpertWeights& x = moe.experts[size_t(e)];
            x.gate_proj = gate_up.part(e, 0, I, H, 0);
            x.up_proj = gate_up.part(e, I * H, I, H, gate_blocks);
            x.down_proj = down.part(e, 0, H, I, 0);
        }
    } else {
        for (int64_t e = 0; e < E; ++e) {
            const std::string q = fmt::format("{}mlp.experts.{}.", p, e);
            ExpertWeights& x = moe.experts[size_t(e)];
            x.gate_proj = src.linear(q + "gate_proj.weight", I, H);
            x.up_proj = src.linear(q + "up_proj.weight", I, H);
            x.down_proj = src.linear(q + "down_proj.weight", H, I);
        }
    }
    const int64_t Is = c.shared_expert_intermediate_size;
    moe.shared_expert.gate_proj = src.linear(p + "mlp.shared_expert.gate_proj.weight", Is, H);
    moe.shared_expert.up_proj = src.linear(p + "mlp.shared_expert.up_proj.weight", Is, H);
    moe.shared_expert.down_proj = src.linear(p + "mlp.shared_expert.down_proj.weight", H, Is);
    moe.shared_expert_gate = src.linear(p + "mlp.shared_expert_gate.weight", 1, H);
}

void load_attention(TensorSource& src, const std::string& p, const ModelConfig& c, AttentionWeights& a) {
    const int64_t H = c.hidden_size, D = c.head_dim;
    a.q_proj = src.linear(p + "self_attn.q_proj.weight", c.q_proj_out(), H);
    a.k_proj = src.linear(p + "self_attn.k_proj.weight", c.num_key_value_heads * D, H);
    a.v_proj = src.linear(p + "self_attn.v_proj.weight", c.num_key_value_heads * D, H);
    a.o_proj = src.linear(p + "self_attn.o_proj.weight", H, c.num_attention_heads * D);
    a.q_norm = src.vec(p + "self_attn.q_norm.weight", D);
    a.k_norm = src.vec(p + "self_attn.k_norm.weight", D);
}

void load_gdn(TensorSource& src, const std::string& p, const ModelConfig& c, GdnWeights& g) {
    const int64_t H = c.hidden_size, Nv = c.linear_num_value_heads;
    g.in_proj_qkv = src.linear(p + "linear_attn.in_proj_qkv.weight", c.linear_conv_dim(), H);
    g.in_proj_z = src.linear(p + "linear_attn.in_proj_z.weight", c.linear_value_dim(), H);
    g.in_proj_b = src.linear(p + "linear_attn.in_proj_b.weight", Nv, H);
    g.in_proj_a = src.linear(p + "linear_attn.in_proj_a.weight", Nv, H);
    g.out_proj = src.linear(p + "linear_attn.out_proj.weight", H, c.linear_value_dim());
    WeightBuffer conv = src.get(p + "linear_attn.conv1d.weight", {c.linear_conv_dim(), 1, c.linear_conv_kernel_dim});
    g.conv1d = conv.data ? to_f32_vector(conv) : std::vector<float>();
    g.A_log = src.vec(p + "linear_attn.A_log", Nv);
    g.dt_bias = src.vec(p + "linear_attn.dt_bias", Nv);
    g.norm = src.vec(p + "linear_attn.norm.weight", c.linear_value_head_dim);
}

void load_layer(TensorSource& src, const std::string& p, const ModelConfig& c, LayerType type,
                DecoderLayerWeights& l) {
    l.type = type;
    l.input_layernorm = src.vec(p + "input_layernorm.weight", c.hidden_size);
    l.post_attention_layernorm = src.vec(p + "post_attention_layernorm.weight", c.hidden_size);
    if (type == LayerType::kFullAttention) load_attention(src, p, c, l.attn);
    else load_gdn(src, p, c, l.gdn);
    load_moe(src, p, c, l.moe);
}

bool has_prefix(const std::string& s, const std::string& prefix) { return s.rfind(prefix, 0) == 0; }

}  // namespace

Result<ModelWeights> load_model_weights(const std::shared_ptr<Checkpoint>& ckpt, const ModelConfig& config,
                                        const LoadOptions& options) {
    TensorSource src(ckpt, config.quantization);
    std::string prefix;
    if (src.has("model.language_model.embed_tokens.weight")) prefix = "model.language_model.";
    else if (src.has("model.embed_tokens.weight")) prefix = "model.";
    else
        return corrupt_data(ckpt->dir() +
                            ": no embedding tensor (looked for model.language_model.embed_tokens.weight "
                            "and model.embed_tokens.weight)");

    const ModelConfig& c = config;
    ModelWeights w;
    w.config = c;
    w.embed_tokens = src.get(prefix + "embed_tokens.weight", {c.vocab_size, c.hidden_size});
    w.layers.resize(size_t(c.num_hidden_layers));
    for (int64_t i = 0; i < c.num_hidden_layers; ++i)
        load_layer(src, fmt::format("{}layers.{}.", prefix, i), c, c.layer_types[size_t(i)], w.layers[size_t(i)]);
    w.norm = src.vec(prefix + "norm.weight", c.hidden_size);
    if (src.has("lm_head.weight") || !c.tie_word_embeddings) {
        w.lm_head = src.linear("lm_head.weight", c.vocab_size, c.hidden_size);
    } else {
        w.lm_head = dense_linear(c.vocab_size, c.hidden_size, w.embed_tokens);
    }

    const bool mtp_in_checkpoint = src.has("mtp.fc.weight");
    if (options.load_mtp && c.mtp_num_hidden_layers > 0 && mtp_in_checkpoint) {
        if (c.mtp_num_hidden_layers != 1)
            return unsupported(fmt::format("mtp_num_hidden_layers is {}; only 1 is supported", c.mtp_num_hidden_layers));
        MtpWeights& m = w.mtp;
        m.present = true;
        m.pre_fc_norm_embedding = src.vec("mtp.pre_fc_norm_embedding.weight", c.hidden_size);
        m.pre_fc_norm_hidden = src.vec("mtp.pre_fc_norm_hidden.weight", c.hidden_size);
        m.fc = src.linear("mtp.fc.weight", c.hidden_size, 2 * c.hidden_size);
        load_layer(src, "mtp.layers.0.", c, LayerType::kFullAttention, m.layer);
        m.norm = src.vec("mtp.norm.weight", c.hidden_size);
    } else if (options.load_mtp && c.mtp_num_hidden_layers > 0) {
        log_warn("{}: config has an MTP block but the checkpoint has no mtp.* tensors; MTP disabled", ckpt->dir());
    }

    if (options.load_vision && c.vision && src.has("model.visual.patch_embed.proj.weight")) {
        Result<VisionTower> tower = VisionTower::load(*ckpt, *c.vision);
        if (!tower.is_ok()) return tower.status().with_context(ckpt->dir());
        if (c.vision->out_hidden_size != c.hidden_size)
            return invalid_argument(fmt::format("{}: vision_config.out_hidden_size {} differs from hidden_size {}",
                                                ckpt->dir(), c.vision->out_hidden_size, c.hidden_size));
        w.visual = std::make_shared<const VisionTower>(std::move(tower).value());
    }

    const bool skip_mtp = !w.mtp.present;
    // ModelOpt's FP8 KV scales (kv_cache_quant_algo FP8) are not used: --kv-cache-dtype decides.
    const bool kv_scales = c.quantization.method == QuantMethod::kModelOpt;
    QS_RETURN_IF_ERROR(src.finish([&](const std::string& n) {
        return has_prefix(n, "model.visual.") || (skip_mtp && has_prefix(n, "mtp.")) ||
               (kv_scales && (n.ends_with(".k_scale") || n.ends_with(".v_scale")));
    }));
    return w;
}

Result<ModelWeights> load_model_dir(const std::string& dir, const LoadOptions& options) {
    QS_ASSIGN_OR_RETURN(ModelConfig config, load_model_config(dir));
    QS_ASSIGN_OR_RETURN(std::shared_ptr<Checkpoint> ckpt, Checkpoint::open(dir));
    return load_model_weights(ckpt, config, options);
}

size_t ModelWeights::storage_bytes() const {
    size_t n = size_t(embed_tokens.numel()) * dtype_size(embed_tokens.dtype) + lm_head.storage_bytes();
    auto moe_bytes = [](const MoeWeights& m) {
        size_t b = m.router.storage_bytes() + m.shared_expert_gate.storage_bytes();
        for (const auto* e : {&m.shared_expert}) b += e->gate_proj.storage_bytes() + e->up_proj.storage_bytes() + e->down_proj.storage_bytes();
        for (const auto& e : m.experts) b += e.gate_proj.storage_bytes() + e.up_proj.storage_bytes() + e.down_proj.storage_bytes();
        return b;
    };
    auto layer_bytes = [&](const DecoderLayerWeights& l) {
        size_t b = moe_bytes(l.moe);
        if (l.type == LayerType::kFullAttention)
            b += l.attn.q_proj.storage_bytes() + l.attn.k_proj.storage_bytes() + l.attn.v_proj.storage_bytes() + l.attn.o_proj.storage_bytes();
        else
            b += l.gdn.in_proj_qkv.storage_bytes() + l.gdn.in_proj_z.storage_bytes() + l.gdn.in_proj_a.storage_bytes() +
                 l.gdn.in_proj_b.storage_bytes() + l.gdn.out_proj.storage_bytes();
        return b;
    };
    for (const auto& l : layers) n += layer_bytes(l);
    if (mtp.present) n += mtp.fc.storage_bytes() + layer_bytes(mtp.layer);
    return n;
}

}  // namespace qs

// Checkpoint writer (see weights_writer.h). Small vectors (norms, A_log, dt_bias) are written as
// F32 as in the real BF16 release; matrices in the requested dtype.
#include "model/weights_writer.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <cstring>
#include <list>

#include "io/safetensors.h"

namespace qs {

namespace {

// Collects tensors to write, owning their converted bytes.
class TensorList {
public:
    explicit TensorList(DType dtype) : dtype_(dtype) {}

    void matrix(const std::string& name, const LinearWeight& w) {
        std::vector<float> row(static_cast<size_t>(w.in_features));
        std::vector<float> all;
        all.reserve(size_t(w.out_features * w.in_features));
        for (int64_t o = 0; o < w.out_features; ++o) {
            w.row_to_f32(o, row.data());
            all.insert(all.end(), row.begin(), row.end());
        }
        add(name, {w.out_features, w.in_features}, all, dtype_);
    }
    // Concatenates the rows of several linears into one [groups, rows_per_group, cols] tensor.
    void stacked(const std::string& name, const std::vector<const LinearWeight*>& ws, int64_t groups,
                 int64_t rows_per_group, int64_t cols) {
        std::vector<float> all;
        std::vector<float> row(static_cast<size_t>(cols));
        for (const LinearWeight* w : ws)
            for (int64_t o = 0; o < w->out_features; ++o) {
                w->row_to_f32(o, row.data());
                all.insert(all.end(), row.begin(), row.end());
            }
        QS_CHECK(int64_t(all.size()) == groups * rows_per_group * cols);
        add(name, {groups, rows_per_group, cols}, all, dtype_);
    }
    void vec(const std::string& name, const std::vector<float>& v, std::vector<int64_t> shape = {}) {
        if (shape.empty()) shape = {int64_t(v.size())};
        add(name, shape, v, DType::kF32);
    }
    void buffer(const std::string& name, const WeightBuffer& b) {
        std::vector<float> all(size_t(b.numel()));
        for (size_t i = 0; i < all.size(); ++i) all[i] = load_as_f32(b.data, b.dtype, i);
        add(name, b.shape, all, dtype_);
    }

    std::vector<TensorToWrite> views() const {
        std::vector<TensorToWrite> out;
        for (const auto& t : tensors_) out.push_back({t.name, t.dtype, t.shape, t.bytes.data()});
        return out;
    }

private:
    struct Owned {
        std::string name;
        DType dtype;
        std::vector<int64_t> shape;
        std::vector<uint8_t> bytes;
    };

    void add(const std::string& name, std::vector<int64_t> shape, const std::vector<float>& v, DType dt) {
        Owned o{name, dt, std::move(shape), std::vector<uint8_t>(v.size() * dtype_size(dt))};
        for (size_t i = 0; i < v.size(); ++i) {
            switch (dt) {
                case DType::kF32: std::memcpy(o.bytes.data() + 4 * i, &v[i], 4); break;
                case DType::kBF16: { uint16_t b = f32_to_bf16(v[i]).bits; std::memcpy(o.bytes.data() + 2 * i, &b, 2); break; }
                case DType::kF16: { uint16_t b = f32_to_f16(v[i]).bits; std::memcpy(o.bytes.data() + 2 * i, &b, 2); break; }
                default: QS_CHECK_MSG(false, "unsupported dtype for writing");
            }
        }
        tensors_.push_back(std::move(o));
    }

    DType dtype_;
    std::list<Owned> tensors_;  // list: stable addresses for views()
};

void add_moe(TensorList& t, const std::string& p, const MoeWeights& m, bool fused) {
    t.matrix(p + "mlp.gate.weight", m.router);
    if (fused) {
        std::vector<const LinearWeight*> gate_up, down;
        for (const auto& e : m.experts) {
            gate_up.push_back(&e.gate_proj);
            gate_up.push_back(&e.up_proj);
            down.push_back(&e.down_proj);
        }
        const int64_t I = m.experts[0].gate_proj.out_features, H = m.experts[0].gate_proj.in_features;
        const int64_t E = int64_t(m.experts.size());
        t.stacked(p + "mlp.experts.gate_up_proj", gate_up, E, 2 * I, H);
        t.stacked(p + "mlp.experts.down_proj", down, E, H, I);
    } else {
        for (size_t e = 0; e < m.experts.size(); ++e) {
            const std::string q = fmt::format("{}mlp.experts.{}.", p, e);
            t.matrix(q + "gate_proj.weight", m.experts[e].gate_proj);
            t.matrix(q + "up_proj.weight", m.experts[e].up_proj);
            t.matrix(q + "down_proj.weight", m.experts[e].down_proj);
        }
    }
    t.matrix(p + "mlp.shared_expert.gate_proj.weight", m.shared_expert.gate_proj);
    t.matrix(p + "mlp.shared_expert.up_proj.weight", m.shared_expert.up_proj);
    t.matrix(p + "mlp.shared_expert.down_proj.weight", m.shared_expert.down_proj);
    t.matrix(p + "mlp.shared_expert_gate.weight", m.shared_expert_gate);
}

void add_layer(TensorList& t, const std::string& p, const DecoderLayerWeights& l, const ModelConfig& c, bool fused) {
    t.vec(p + "input_layernorm.weight", l.input_layernorm);
    t.vec(p + "post_attention_layernorm.weight", l.post_attention_layernorm);
    if (l.type == LayerType::kFullAttention) {
        t.matrix(p + "self_attn.q_proj.weight", l.attn.q_proj);
        t.matrix(p + "self_attn.k_proj.weight", l.attn.k_proj);
        t.matrix(p + "self_attn.v_proj.weight", l.attn.v_proj);
        t.matrix(p + "self_attn.o_proj.weight", l.attn.o_proj);
        t.vec(p + "self_attn.q_norm.weight", l.attn.q_norm);
        t.vec(p + "self_attn.k_norm.weight", l.attn.k_norm);
    } else {
        t.matrix(p + "linear_attn.in_proj_qkv.weight", l.gdn.in_proj_qkv);
        t.matrix(p + "linear_attn.in_proj_z.weight", l.gdn.in_proj_z);
        t.matrix(p + "linear_attn.in_proj_b.weight", l.gdn.in_proj_b);
        t.matrix(p + "linear_attn.in_proj_a.weight", l.gdn.in_proj_a);
        t.matrix(p + "linear_attn.out_proj.weight", l.gdn.out_proj);
        t.vec(p + "linear_attn.conv1d.weight", l.gdn.conv1d, {c.linear_conv_dim(), 1, c.linear_conv_kernel_dim});
        t.vec(p + "linear_attn.A_log", l.gdn.A_log);
        t.vec(p + "linear_attn.dt_bias", l.gdn.dt_bias);
        t.vec(p + "linear_attn.norm.weight", l.gdn.norm);
    }
    add_moe(t, p, l.moe, fused);
}

}  // namespace

Status save_model_dir(const ModelWeights& w, const std::string& dir, const SaveOptions& options) {
    const ModelConfig& c = w.config;
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    if (ec) return io_error(dir + ": cannot create directory: " + ec.message());
    TensorList t(options.dtype);
    const std::string& p = options.prefix;
    t.buffer(p + "embed_tokens.weight", w.embed_tokens);
    for (size_t i = 0; i < w.layers.size(); ++i)
        add_layer(t, fmt::format("{}layers.{}.", p, i), w.layers[i], c, options.fused_experts);
    t.vec(p + "norm.weight", w.norm);
    t.matrix("lm_head.weight", w.lm_head);
    if (w.mtp.present) {
        t.vec("mtp.pre_fc_norm_embedding.weight", w.mtp.pre_fc_norm_embedding);
        t.vec("mtp.pre_fc_norm_hidden.weight", w.mtp.pre_fc_norm_hidden);
        t.matrix("mtp.fc.weight", w.mtp.fc);
        add_layer(t, "mtp.layers.0.", w.mtp.layer, c, options.fused_experts);
        t.vec("mtp.norm.weight", w.mtp.norm);
    }
    QS_RETURN_IF_ERROR(write_safetensors(dir + "/model.safetensors", t.views(), {{"format", "pt"}}));
    std::ofstream f(dir + "/config.json");
    f << model_config_to_json(c).dump(2) << "\n";
    if (!f) return io_error(dir + "/config.json: write failed");
    return Status::ok();
}

}  // namespace qs

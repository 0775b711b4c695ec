// Checkpoint writer (see weights_writer.h). Small vectors (norms, A_log, dt_bias) are written as
// F32 as in the real BF16 release; matrices in the requested dtype, or FP8 with block scales.
#include "model/weights_writer.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <list>

#include "io/safetensors.h"
#include "model/fp8_block.h"

namespace qs {

namespace {

bool ends_with(const std::string& s, const std::string& suffix) {
    return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// FP8 codes and scales of one linear: copied when it is FP8 already, else quantised.
struct Fp8Parts {
    std::vector<uint8_t> codes;   // [out, in]
    std::vector<uint8_t> scales;  // [⌈out/128⌉, ⌈in/128⌉] of `scale_dtype`
    DType scale_dtype = DType::kF32;
};

Result<Fp8Parts> fp8_parts(const std::string& name, const LinearWeight& w, DType scale_dtype) {
    Fp8Parts p;
    const int64_t out = w.out_features, in = w.in_features;
    p.codes.resize(size_t(out * in));
    if (w.format == WeightFormat::kFP8Block) {
        std::memcpy(p.codes.data(), w.weight.data, p.codes.size());
        p.scale_dtype = w.scale_inv.dtype;
        p.scales.resize(size_t(w.scale_inv.numel()) * dtype_size(p.scale_dtype));
        std::memcpy(p.scales.data(), w.scale_inv.data, p.scales.size());
        return p;
    }
    p.scale_dtype = scale_dtype;
    const int64_t nb = fp8_num_blocks(in);
    p.scales.resize(size_t(fp8_num_blocks(out) * nb) * dtype_size(scale_dtype));
    std::vector<float> rows(size_t(kFp8BlockSize * in));
    for (int64_t r0 = 0; r0 < out; r0 += kFp8BlockSize) {
        const int64_t n = std::min(kFp8BlockSize, out - r0);
        for (int64_t r = 0; r < n; ++r) w.row_to_f32(r0 + r, rows.data() + r * in);
        if (!quantize_fp8_block_row(rows.data(), n, in, scale_dtype, p.codes.data() + r0 * in,
                                    p.scales.data() + size_t(r0 / kFp8BlockSize * nb) * dtype_size(scale_dtype)))
            return invalid_argument(fmt::format("{}: non-finite values cannot be quantised to FP8", name));
    }
    return p;
}

// Collects tensors to write, owning their converted bytes.
class TensorList {
public:
    explicit TensorList(const SaveOptions& options) : options_(options) {}

    // A linear [out, in] as `name` (ending in .weight): FP8 + `name`_scale_inv where the options
    // and the module's role say so, else dense in the options' dtype.
    void matrix(const std::string& name, const LinearWeight& w) {
        if (!write_fp8(name, {&w})) {
            add(name, {w.out_features, w.in_features}, dense_values({&w}), options_.dtype);
            return;
        }
        fp8(name, {&w}, {w.out_features, w.in_features});
    }
    // Concatenates the rows of several linears into one [groups, rows_per_group, cols] tensor.
    void stacked(const std::string& name, const std::vector<const LinearWeight*>& ws, int64_t groups,
                 int64_t rows_per_group, int64_t cols) {
        if (!write_fp8(name, ws)) {
            std::vector<float> all = dense_values(ws);
            QS_CHECK(int64_t(all.size()) == groups * rows_per_group * cols);
            add(name, {groups, rows_per_group, cols}, all, options_.dtype);
            return;
        }
        fp8(name, ws, {groups, rows_per_group, cols});
    }
    void vec(const std::string& name, const std::vector<float>& v, std::vector<int64_t> shape = {}) {
        if (shape.empty()) shape = {int64_t(v.size())};
        add(name, shape, v, DType::kF32);
    }
    void buffer(const std::string& name, const WeightBuffer& b) {
        std::vector<float> all(size_t(b.numel()));
        for (size_t i = 0; i < all.size(); ++i) all[i] = load_as_f32(b.data, b.dtype, i);
        add(name, b.shape, all, options_.dtype);
    }

    // Tensors largest element first, so every tensor is aligned to its element size.
    std::vector<TensorToWrite> views() const {
        std::vector<TensorToWrite> out;
        for (const auto& t : tensors_) out.push_back({t.name, t.dtype, t.shape, t.bytes.data()});
        std::stable_sort(out.begin(), out.end(), [](const TensorToWrite& a, const TensorToWrite& b) {
            return dtype_size(a.dtype) > dtype_size(b.dtype);
        });
        return out;
    }
    std::vector<std::string> names() const {
        std::vector<std::string> out;
        for (const auto& t : tensors_) out.push_back(t.name);
        return out;
    }
    bool any_fp8() const { return any_fp8_; }
    const Status& status() const { return status_; }

private:
    struct Owned {
        std::string name;
        DType dtype;
        std::vector<int64_t> shape;
        std::vector<uint8_t> bytes;
    };

    // FP8 when the options ask for it and the module is quantised, or when the weight already is
    // FP8 in a module that may be (mtp.fc), unless the options ask for dense.
    bool write_fp8(const std::string& name, const std::vector<const LinearWeight*>& ws) const {
        const std::string module = ends_with(name, ".weight") ? name.substr(0, name.size() - 7) : name;
        const Fp8Role role = fp8_role(module);
        if (options_.format != WeightFormat::kFP8Block) return false;
        if (role == Fp8Role::kQuantized) return true;
        return role == Fp8Role::kOptional && ws[0]->format == WeightFormat::kFP8Block;
    }

    static std::vector<float> dense_values(const std::vector<const LinearWeight*>& ws) {
        std::vector<float> all, row;
        for (const LinearWeight* w : ws) {
            row.resize(size_t(w->in_features));
            for (int64_t o = 0; o < w->out_features; ++o) {
                w->row_to_f32(o, row.data());
                all.insert(all.end(), row.begin(), row.end());
            }
        }
        return all;
    }

    // Codes of the linears back to back and their scale grids back to back: one [.., rows, cols]
    // FP8 tensor whose block rows do not straddle two linears (every linear but the last of a
    // group has a multiple of 128 rows).
    void fp8(const std::string& name, const std::vector<const LinearWeight*>& ws, std::vector<int64_t> shape) {
        if (!status_.is_ok()) return;
        const int64_t rows_per_group = shape[shape.size() - 2];
        Owned codes{name, DType::kF8E4M3, shape, {}};
        Owned scales{name + "_scale_inv", DType::kF32, {}, {}};  // X.weight_scale_inv, …gate_up_proj_scale_inv
        int64_t group_rows = 0;
        for (size_t i = 0; i < ws.size(); ++i) {
            auto parts = fp8_parts(name, *ws[i], options_.scale_dtype);
            if (!parts.is_ok()) {
                status_ = parts.status();
                return;
            }
            if (i == 0) scales.dtype = parts->scale_dtype;
            if (parts->scale_dtype != scales.dtype) {
                status_ = invalid_argument(fmt::format("{}: the stacked FP8 linears mix scale dtypes", name));
                return;
            }
            group_rows += ws[i]->out_features;
            const bool group_end = group_rows == rows_per_group;
            if (!group_end && ws[i]->out_features % kFp8BlockSize != 0) {
                status_ = invalid_argument(fmt::format(
                    "{}: cannot write stacked FP8 experts whose parts have {} rows (not a multiple of 128); "
                    "write experts per expert",
                    name, ws[i]->out_features));
                return;
            }
            if (group_end) group_rows = 0;
            codes.bytes.insert(codes.bytes.end(), parts->codes.begin(), parts->codes.end());
            scales.bytes.insert(scales.bytes.end(), parts->scales.begin(), parts->scales.end());
        }
        const int64_t cols = shape.back();
        scales.shape = shape;
        scales.shape[shape.size() - 2] = fp8_num_blocks(rows_per_group);
        scales.shape.back() = fp8_num_blocks(cols);
        tensors_.push_back(std::move(codes));
        tensors_.push_back(std::move(scales));
        any_fp8_ = true;
    }

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

    const SaveOptions& options_;
    std::list<Owned> tensors_;  // list: stable addresses for views()
    bool any_fp8_ = false;
    Status status_ = Status::ok();
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
    if (options.format == WeightFormat::kFP8Block && options.scale_dtype != DType::kF32 &&
        options.scale_dtype != DType::kBF16)
        return invalid_argument("FP8 scales are written as F32 or BF16");
    TensorList t(options);
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
    QS_RETURN_IF_ERROR(t.status());
    QS_RETURN_IF_ERROR(write_safetensors(dir + "/model.safetensors", t.views(), {{"format", "pt"}}));
    ModelConfig written = c;
    written.quantization = t.any_fp8() ? fp8_block_quantization(fp8_unconverted_modules(t.names())) : QuantizationConfig{};
    std::ofstream f(dir + "/config.json");
    f << model_config_to_json(written).dump(2) << "\n";
    if (!f) return io_error(dir + "/config.json: write failed");
    return Status::ok();
}

}  // namespace qs

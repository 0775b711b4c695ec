// TensorSource: the weight loader's view of a checkpoint (model/ internal). Every tensor the
// model needs is looked up by name; each use is recorded so that tensors nobody asked for are
// reported as unexpected, and problems are collected so one run names every one of them.
// Quantised linears of the GPTQ/AutoRound, compressed-tensors and ModelOpt formats are built by
// load_quantized_linear (quant_linear_loader.cpp). Loading thread only.
#pragma once

#include <fmt/format.h>

#include <cmath>
#include <functional>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "backend/linear_weight.h"
#include "config/quantization_config.h"
#include "io/checkpoint.h"
#include "model/fp8_block.h"

namespace qs::detail {

inline std::string shape_str(const std::vector<int64_t>& s) {
    std::string out = "[";
    for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
    return out + "]";
}

inline bool is_float_dtype(DType t) { return t == DType::kF32 || t == DType::kF16 || t == DType::kBF16; }

// What a tensor may hold: float values, FP8 E4M3 codes, or block scales (F32/BF16).
enum class Kind { kFloat, kFp8, kScale };

// The scale tensor of an FP8 weight: `X.weight` → `X.weight_scale_inv`; a fused expert tensor
// without the `.weight` suffix (`…experts.gate_up_proj`) → `…experts.gate_up_proj_scale_inv`.
inline std::string scale_name_of(const std::string& weight) { return weight + "_scale_inv"; }

inline std::string module_of(const std::string& weight) {
    const std::string suffix = ".weight";
    if (weight.size() > suffix.size() && weight.compare(weight.size() - suffix.size(), suffix.size(), suffix) == 0)
        return weight.substr(0, weight.size() - suffix.size());
    return weight;
}

class TensorSource;

// A quantised linear [out, in] of module `module` (GPTQ/AutoRound, compressed-tensors, ModelOpt:
// the format from the tensors present, checked against quantization_config.module_quant).
LinearWeight load_quantized_linear(TensorSource& src, const std::string& module, int64_t out, int64_t in);

class TensorSource {
public:
    TensorSource(std::shared_ptr<Checkpoint> ckpt, QuantizationConfig quant)
        : ckpt_(std::move(ckpt)), quant_(std::move(quant)) {}

    bool has(const std::string& name) const { return ckpt_->find(name) != nullptr; }
    bool is_fp8(const std::string& name) const {
        const TensorInfo* t = ckpt_->find(name);
        return t && t->dtype == DType::kF8E4M3;
    }

    // The tensor `name` with the expected shape and kind; on a problem, records it and returns {}.
    WeightBuffer get(const std::string& name, const std::vector<int64_t>& shape, Kind kind = Kind::kFloat) {
        const TensorInfo* t = ckpt_->find(name);
        if (!t) {
            missing_.push_back(name);
            return {};
        }
        used_.insert(name);
        if (t->shape != shape) {
            problems_.push_back(fmt::format("tensor {} has shape {} but the config implies {}", name,
                                            shape_str(t->shape), shape_str(shape)));
            return {};
        }
        const bool dtype_ok = kind == Kind::kFloat ? is_float_dtype(t->dtype)
                              : kind == Kind::kFp8 ? t->dtype == DType::kF8E4M3
                                                   : t->dtype == DType::kF32 || t->dtype == DType::kBF16;
        if (!dtype_ok) {
            const char* expected = kind == Kind::kFloat ? "F32, F16 or BF16" : kind == Kind::kFp8 ? "F8_E4M3" : "F32 or BF16";
            problems_.push_back(fmt::format("tensor {} has dtype {}; expected {}", name, dtype_name(t->dtype), expected));
            return {};
        }
        WeightBuffer b;
        b.dtype = t->dtype;
        b.shape = t->shape;
        b.data = t->data;
        b.owner = ckpt_;
        return b;
    }

    // The block scales of FP8 weight `weight` whose matrices are [rows, cols] (`groups` of them
    // stacked for a fused expert tensor): [groups,] ⌈rows/128⌉, ⌈cols/128⌉, finite values.
    WeightBuffer scales(const std::string& weight, int64_t groups, int64_t rows, int64_t cols) {
        const std::string name = scale_name_of(weight);
        std::vector<int64_t> shape = {fp8_num_blocks(rows), fp8_num_blocks(cols)};
        if (groups > 0) shape.insert(shape.begin(), groups);
        const TensorInfo* t = ckpt_->find(name);
        if (!t) {
            problems_.push_back(fmt::format("tensor {} is F8_E4M3 but its scale tensor {} is missing", weight, name));
            return {};
        }
        if (t->shape != shape) {
            used_.insert(name);
            problems_.push_back(fmt::format("tensor {} has shape {} but the FP8 weight {} needs {} (one scale per "
                                            "128x128 block)",
                                            name, shape_str(t->shape), weight, shape_str(shape)));
            return {};
        }
        WeightBuffer b = get(name, shape, Kind::kScale);
        if (!b.data) return b;
        for (int64_t i = 0; i < b.numel(); ++i) {
            const float v = load_as_f32(b.data, b.dtype, size_t(i));
            if (!std::isfinite(v)) {
                problems_.push_back(fmt::format("tensor {} has a non-finite scale ({}) at flat index {}", name, v, i));
                return {};
            }
        }
        return b;
    }

    // Checks that the FP8 weight `weight` may be FP8 at all (module role, quantization_config).
    bool fp8_allowed(const std::string& weight) {
        const std::string module = module_of(weight);
        const Fp8Role role = fp8_role(module);
        if (role != Fp8Role::kQuantized && role != Fp8Role::kOptional) {
            problems_.push_back(fmt::format(
                "tensor {} is F8_E4M3 but {} stays unquantised in the FP8 block format (only attention q/k/v/o, "
                "GDN in_proj_qkv/in_proj_z/out_proj, routed and shared experts and mtp.fc may be FP8)",
                weight, module));
            return false;
        }
        if (!quant_.quantized()) {
            if (!reported_no_quant_config_)
                problems_.push_back(fmt::format("tensor {} is F8_E4M3 but config.json has no quantization_config "
                                                "(expected quant_method \"fp8\", weight_block_size [128, 128])",
                                                weight));
            reported_no_quant_config_ = true;
            return false;
        }
        if (quant_.excludes(module)) {
            problems_.push_back(fmt::format(
                "tensor {} is F8_E4M3 but quantization_config.modules_to_not_convert lists {}", weight, module));
            return false;
        }
        return true;
    }

    // A linear [out, in]: dense (F32/F16/BF16) or FP8 with block scales, by the weight's dtype;
    // with a GPTQ/AutoRound, compressed-tensors or ModelOpt config, as load_quantized_linear says.
    LinearWeight linear(const std::string& name, int64_t out, int64_t in) {
        if (quant_.method == QuantMethod::kGptq || quant_.method == QuantMethod::kCompressedTensors ||
            quant_.method == QuantMethod::kModelOpt)
            return load_quantized_linear(*this, module_of(name), out, in);
        LinearWeight w;
        w.out_features = out;
        w.in_features = in;
        if (is_fp8(name)) {
            if (!fp8_allowed(name)) {
                used_.insert(name);
                used_.insert(scale_name_of(name));
                return w;
            }
            w.format = WeightFormat::kFP8Block;
            w.weight = get(name, {out, in}, Kind::kFp8);
            w.scale_inv = scales(name, 0, out, in);
            return w;
        }
        w.weight = get(name, {out, in});
        stray_scale(name);
        return w;
    }

    // A scale tensor next to a weight that is not FP8 is an error (it would be silently ignored).
    void stray_scale(const std::string& weight) {
        const std::string scale = scale_name_of(weight);
        if (!has(scale) || is_fp8(weight)) return;
        used_.insert(scale);
        problems_.push_back(fmt::format("tensor {} exists but {} is not F8_E4M3", scale, weight));
    }

    std::vector<float> vec(const std::string& name, int64_t n) {
        WeightBuffer b = get(name, {n});
        return b.data ? to_f32_vector(b) : std::vector<float>(size_t(n), 0.0f);
    }

    void mark_used(const std::string& name) { used_.insert(name); }
    const QuantizationConfig& quant() const { return quant_; }
    const TensorInfo* info(const std::string& name) const { return ckpt_->find(name); }

    // The tensor `name` with the expected shape (empty shape: a scalar stored as [] or [1]) and
    // one of `dtypes`; on a problem, records it and returns {}.
    WeightBuffer get_typed(const std::string& name, const std::vector<int64_t>& shape, std::vector<DType> dtypes,
                           const char* expected) {
        const TensorInfo* t = ckpt_->find(name);
        if (!t) {
            missing_.push_back(name);
            return {};
        }
        used_.insert(name);
        const bool scalar_ok = shape.empty() && (t->shape.empty() || t->shape == std::vector<int64_t>{1});
        if (t->shape != shape && !scalar_ok) {
            problems_.push_back(fmt::format("tensor {} has shape {} but the config implies {}", name,
                                            shape_str(t->shape), shape.empty() ? "a scalar" : shape_str(shape)));
            return {};
        }
        bool ok = false;
        for (DType d : dtypes) ok = ok || t->dtype == d;
        if (!ok) {
            problems_.push_back(fmt::format("tensor {} has dtype {}; expected {}", name, dtype_name(t->dtype), expected));
            return {};
        }
        WeightBuffer b;
        b.dtype = t->dtype;
        b.shape = t->shape;
        b.data = t->data;
        b.owner = ckpt_;
        return b;
    }
    void problem(std::string message) { problems_.push_back(std::move(message)); }

    Status finish(const std::function<bool(const std::string&)>& ignored) {
        std::vector<std::string> unexpected;
        for (const auto& n : ckpt_->names())
            if (!used_.count(n) && !ignored(n)) unexpected.push_back(n);
        std::vector<std::string> lines = problems_;
        auto list = [](const std::vector<std::string>& names) {
            std::string s;
            for (size_t i = 0; i < names.size() && i < 12; ++i) s += (i ? ", " : "") + names[i];
            if (names.size() > 12) s += fmt::format(", ... ({} in all)", names.size());
            return s;
        };
        if (!missing_.empty()) lines.push_back("missing tensors: " + list(missing_));
        if (!unexpected.empty()) lines.push_back("unexpected tensors: " + list(unexpected));
        if (lines.empty()) return Status::ok();
        std::string msg = ckpt_->dir() + ": ";
        for (size_t i = 0; i < lines.size(); ++i) msg += (i ? "; " : "") + lines[i];
        return corrupt_data(msg);
    }

private:
    std::shared_ptr<Checkpoint> ckpt_;
    QuantizationConfig quant_;
    bool reported_no_quant_config_ = false;
    std::set<std::string> used_;
    std::vector<std::string> missing_;
    std::vector<std::string> problems_;
};


}  // namespace qs::detail

// Quantised linears of GPTQ/AutoRound, compressed-tensors and ModelOpt checkpoints (spec §4.3,
// §4.4; tensor layouts in backend/linear_weight.h). The tensors present decide the stored
// format; quantization_config.module_quant decides what it must be; a disagreement, a shape the
// config's bits/group size do not imply, or an out-of-range value is a problem naming the tensor
// and the config field. Loading thread.
#include <fmt/format.h>

#include <cstring>

#include "model/tensor_source.h"

namespace qs::detail {

namespace {

using QKind = ModuleQuant::Kind;

const char* kind_name(QKind k) {
    switch (k) {
        case QKind::kUnquantized: return "unquantised (16/32-bit)";
        case QKind::kFP8Block: return "FP8 with 128x128 block scales";
        case QKind::kIntGroup: return "grouped integers";
        case QKind::kNvfp4: return "NVFP4";
        case QKind::kFP8Tensor: return "FP8 with a per-tensor scale";
    }
    return "?";
}

uint32_t word_at(const WeightBuffer& b, size_t i) {
    uint32_t u;
    std::memcpy(&u, static_cast<const uint8_t*>(b.data) + 4 * i, 4);
    return u;
}

const std::vector<DType> kFloat = {DType::kF32, DType::kF16, DType::kBF16};

// The scalar at `name` as float32 (F32 or BF16), finite and > 0; 0 after a recorded problem.
float positive_scalar(TensorSource& src, const std::string& name) {
    WeightBuffer b = src.get_typed(name, {}, {DType::kF32, DType::kBF16}, "F32 or BF16");
    if (!b.data) return 0.0f;
    const float v = load_as_f32(b.data, b.dtype, 0);
    if (!std::isfinite(v) || v <= 0.0f) {
        src.problem(fmt::format("tensor {} is {}; expected a finite positive scale", name, v));
        return 0.0f;
    }
    return v;
}

// What the tensors of `module` say it is stored as (kUnquantized for a float `.weight`).
QKind stored_kind(const TensorSource& src, const std::string& module) {
    if (src.has(module + ".qweight")) return QKind::kIntGroup;
    if (const TensorInfo* p = src.info(module + ".weight_packed"))
        return p->dtype == DType::kU8 ? QKind::kNvfp4 : QKind::kIntGroup;
    if (const TensorInfo* w = src.info(module + ".weight")) {
        if (w->dtype == DType::kU8) return QKind::kNvfp4;
        if (w->dtype == DType::kF8E4M3) return src.has(module + ".weight_scale_inv") ? QKind::kFP8Block : QKind::kFP8Tensor;
    }
    return QKind::kUnquantized;
}

void check_g_idx(TensorSource& src, LinearWeight& w, const std::string& name, int64_t groups, int64_t group_size) {
    if (!w.g_idx.data) return;
    bool trivial = true;
    for (int64_t i = 0; i < w.in_features; ++i) {
        const int32_t g = int32_t(word_at(w.g_idx, size_t(i)));
        if (g < 0 || g >= groups) {
            src.problem(fmt::format("tensor {} has group {} at input {}; expected 0..{}", name, g, i, groups - 1));
            w.g_idx = {};
            return;
        }
        trivial = trivial && g == i / group_size;
    }
    if (trivial) w.g_idx = {};  // desc_act false / actorder weight: the plain i / group_size
}

// GPTQ / AutoRound auto_gptq packing: qweight, qzeros, scales, optional g_idx.
void load_gptq(TensorSource& src, const std::string& m, const ModuleQuant& q, LinearWeight& w) {
    const int64_t in = w.in_features, out = w.out_features;
    IntGroupParams& p = w.int_params;
    p.packing = IntPacking::kGptq;
    p.bits = q.bits;
    p.group_size = q.group_size > 0 ? q.group_size : in;
    p.zero_offset = src.quant().zero_offset;
    const int64_t pack = p.pack(), groups = p.groups(in);
    w.weight = src.get_typed(m + ".qweight", {(in + pack - 1) / pack, out}, {DType::kI32}, "I32");
    w.scales = src.get_typed(m + ".scales", {groups, out}, kFloat, "F16, BF16 or F32");
    WeightBuffer zeros = src.get_typed(m + ".qzeros", {groups, (out + pack - 1) / pack}, {DType::kI32}, "I32");
    if (!q.sym) {
        w.zeros = zeros;
    } else if (zeros.data) {
        // Symmetric: the zero is 2^(bits-1); the stored one must say so (v1 stores it minus 1).
        const uint32_t code = uint32_t((1 << (q.bits - 1)) - p.zero_offset), mask = (1u << q.bits) - 1u;
        for (int64_t i = 0; i < zeros.numel(); ++i) {
            const uint32_t word = word_at(zeros, size_t(i));
            bool ok = true;
            for (int64_t k = 0; k < pack && ok; ++k) ok = ((word >> (k * q.bits)) & mask) == code;
            if (!ok) {
                src.problem(fmt::format("tensor {}.qzeros holds zero codes other than {} although {} says sym true",
                                        m, code, q.origin));
                break;
            }
        }
    }
    if (src.has(m + ".g_idx")) w.g_idx = src.get_typed(m + ".g_idx", {in}, {DType::kI32}, "I32");
    else if (q.act_order)
        src.problem(fmt::format("module {}: {} sets desc_act but there is no {}.g_idx", m, q.origin, m));
    check_g_idx(src, w, m + ".g_idx", groups, p.group_size);
}

// compressed-tensors pack-quantized: weight_packed, weight_scale, weight_zero_point, weight_shape,
// optional weight_g_idx.
void load_ct_int(TensorSource& src, const std::string& m, const ModuleQuant& q, LinearWeight& w) {
    const int64_t in = w.in_features, out = w.out_features;
    IntGroupParams& p = w.int_params;
    p.packing = IntPacking::kCompressed;
    p.bits = q.bits;
    p.group_size = q.group_size > 0 ? q.group_size : in;
    p.zero_offset = 0;  // the zero point is packed with the same +2^(bits-1) offset as the codes
    const int64_t pack = p.pack(), groups = p.groups(in);
    w.weight = src.get_typed(m + ".weight_packed", {out, (in + pack - 1) / pack}, {DType::kI32}, "I32");
    w.scales = src.get_typed(m + ".weight_scale", {out, groups}, kFloat, "F16, BF16 or F32");
    if (!q.sym) w.zeros = src.get_typed(m + ".weight_zero_point", {(out + pack - 1) / pack, groups}, {DType::kI32}, "I32");
    else if (src.has(m + ".weight_zero_point"))
        src.problem(fmt::format("tensor {}.weight_zero_point exists but {} says symmetric true", m, q.origin));
    if (src.has(m + ".weight_shape")) {
        WeightBuffer shape = src.get_typed(m + ".weight_shape", {2}, {DType::kI64, DType::kI32}, "I64 or I32");
        if (shape.data) {
            int64_t s[2];
            for (int k = 0; k < 2; ++k) {
                if (shape.dtype == DType::kI64) std::memcpy(&s[k], static_cast<const uint8_t*>(shape.data) + 8 * k, 8);
                else s[k] = int32_t(word_at(shape, size_t(k)));
            }
            if (s[0] != out || s[1] != in)
                src.problem(fmt::format("tensor {}.weight_shape is [{}, {}] but the config implies [{}, {}]", m, s[0],
                                        s[1], out, in));
        }
    }
    if (src.has(m + ".weight_g_idx")) w.g_idx = src.get_typed(m + ".weight_g_idx", {in}, {DType::kI32}, "I32");
    else if (q.act_order)
        src.problem(fmt::format("module {}: {} sets actorder \"group\" but there is no {}.weight_g_idx", m, q.origin, m));
    check_g_idx(src, w, m + ".weight_g_idx", groups, p.group_size);
}

void check_e4m3_scales(TensorSource& src, const WeightBuffer& s, const std::string& name) {
    if (!s.data) return;
    const uint8_t* b = static_cast<const uint8_t*>(s.data);
    for (int64_t i = 0; i < s.numel(); ++i)
        if ((b[i] & 0x7F) == 0x7F) {
            src.problem(fmt::format("tensor {} holds an E4M3 NaN at flat index {}", name, i));
            return;
        }
}

// NVFP4: ModelOpt (weight, weight_scale, weight_scale_2, input_scale) or compressed-tensors
// (weight_packed, weight_scale, weight_global_scale, input_global_scale).
void load_nvfp4(TensorSource& src, const std::string& m, LinearWeight& w) {
    const int64_t in = w.in_features, out = w.out_features;
    if (in % kNvfp4GroupSize != 0) {
        src.problem(fmt::format("module {} is NVFP4 but in_features {} is not a multiple of 16", m, in));
        for (const char* s : {".weight", ".weight_packed", ".weight_scale", ".weight_scale_2", ".weight_global_scale",
                              ".input_scale", ".input_global_scale"})
            src.mark_used(m + s);
        return;
    }
    const bool ct = src.quant().method == QuantMethod::kCompressedTensors;
    w.weight = src.get_typed(m + (ct ? ".weight_packed" : ".weight"), {out, in / 2}, {DType::kU8}, "U8");
    w.scales = src.get_typed(m + ".weight_scale", {out, in / kNvfp4GroupSize}, {DType::kF8E4M3}, "F8_E4M3");
    check_e4m3_scales(src, w.scales, m + ".weight_scale");
    w.nvfp4_global = ct ? Nvfp4Global::kDivide : Nvfp4Global::kMultiply;
    w.global_scale = positive_scalar(src, m + (ct ? ".weight_global_scale" : ".weight_scale_2"));
    // Activation scales serve W4A4 kernels only; these weights run with 16/32-bit activations.
    const std::string act = m + (ct ? ".input_global_scale" : ".input_scale");
    if (src.has(act)) positive_scalar(src, act);
}

// ModelOpt FP8 per tensor → the FP8 block format with every block's scale the tensor's scale
// (exact: W = fp8(q) · weight_scale either way), so FP8 GEMMs run it unchanged.
void load_fp8_tensor(TensorSource& src, const std::string& m, LinearWeight& w) {
    const int64_t in = w.in_features, out = w.out_features;
    w.format = WeightFormat::kFP8Block;
    w.weight = src.get_typed(m + ".weight", {out, in}, {DType::kF8E4M3}, "F8_E4M3");
    const float s = positive_scalar(src, m + ".weight_scale");
    if (src.has(m + ".input_scale")) positive_scalar(src, m + ".input_scale");
    auto grid = std::make_shared<std::vector<float>>(size_t(fp8_num_blocks(out) * fp8_num_blocks(in)), s);
    w.scale_inv.dtype = DType::kF32;
    w.scale_inv.shape = {fp8_num_blocks(out), fp8_num_blocks(in)};
    w.scale_inv.data = grid->data();
    w.scale_inv.owner = grid;
}

}  // namespace

LinearWeight load_quantized_linear(TensorSource& src, const std::string& module, int64_t out, int64_t in) {
    LinearWeight w;
    w.out_features = out;
    w.in_features = in;
    const ModuleQuant want = src.quant().module_quant(module);
    const QKind have = stored_kind(src, module);
    const QuantMethod method = src.quant().method;
    if (have == QKind::kUnquantized) {
        // GPTQ/AutoRound exporters skip layers silently (shapes that do not divide, routers), so a
        // float weight is accepted there; compressed-tensors and ModelOpt list every skipped module.
        if (want.kind != QKind::kUnquantized && method != QuantMethod::kGptq)
            src.problem(fmt::format("module {} is stored as a float {}.weight but {} makes it {}", module, module,
                                    want.origin, kind_name(want.kind)));
        w.weight = src.get(module + ".weight", {out, in});
        return w;
    }
    const bool method_layout = (method == QuantMethod::kGptq && src.has(module + ".qweight")) ||
                               (method == QuantMethod::kCompressedTensors && src.has(module + ".weight_packed")) ||
                               (method == QuantMethod::kModelOpt && src.has(module + ".weight"));
    if (have != want.kind || !method_layout) {
        src.problem(fmt::format("module {} is stored as {}{} but {} makes it {}", module, kind_name(have),
                                method_layout ? "" : " in another library's tensor layout", want.origin,
                                kind_name(want.kind)));
        for (const char* s : {".weight", ".qweight", ".qzeros", ".scales", ".g_idx", ".weight_packed", ".weight_scale",
                              ".weight_zero_point", ".weight_shape", ".weight_g_idx", ".weight_scale_2",
                              ".weight_global_scale", ".input_scale", ".input_global_scale", ".weight_scale_inv"})
            src.mark_used(module + s);
        return w;
    }
    switch (have) {
        case QKind::kIntGroup:
            w.format = WeightFormat::kIntGroup;
            if (method == QuantMethod::kGptq) load_gptq(src, module, want, w);
            else load_ct_int(src, module, want, w);
            break;
        case QKind::kNvfp4:
            w.format = WeightFormat::kNvfp4;
            load_nvfp4(src, module, w);
            break;
        case QKind::kFP8Tensor: load_fp8_tensor(src, module, w); break;
        default: break;  // kFP8Block under these methods is refused above (want never says it)
    }
    if (!w.weight.data || (w.format != WeightFormat::kFP8Block && !w.scales.data)) w.format = WeightFormat::kDense;
    return w;
}

}  // namespace qs::detail

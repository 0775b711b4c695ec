// Random weights of a config's shapes (`--load-format dummy`). Deterministic by seed: every
// tensor is filled from a counter-based generator keyed by (seed, tensor name, chunk index), so
// values do not depend on thread count or load order. Scales keep activations O(1): each linear
// has std ≈ gain/sqrt(in_features), output projections use a smaller gain so the residual stream
// grows slowly over 40 layers, zero-centred norm weights are near 0 (scale ≈ 1).
// FP8 block format: the same BF16 values, quantised one 128-row block row at a time as they are
// generated (fp8_block.h); INT4 W4A16 (WeightFormat::kIntGroup): the same BF16 values quantised
// as `qwenserve quantize --format int4-w4a16` does (low_bit_rtn.h: compressed-tensors
// pack-quantized, symmetric, group 128, bf16 scales) on the modules that format quantises; NVFP4
// (WeightFormat::kNvfp4): the same for `--format nvfp4` (nvfp4-pack-quantized, E4M3 scales per 16,
// a global scale per matrix from the values' bound); all
// work of all tensors runs in one OpenMP loop (DummyFactory::run).
// Also the shape-only weights (no tensors) that Qwen36Model runs on NullOps with.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "core/check.h"
#include "core/progress.h"
#include "model/dummy_values.h"
#include "model/fp8_block.h"
#include "model/low_bit_rtn.h"
#include "model/weights.h"

namespace qs {

namespace {

using namespace dummy;

// `shape` elements of a shared buffer from element `offset` on, as a WeightBuffer that keeps the
// whole buffer alive (the dummy linears' codes and scales are slices of per-layer buffers).
template <class T>
WeightBuffer slice_of(const std::shared_ptr<T[]>& buf, int64_t offset, DType dtype, std::vector<int64_t> shape) {
    WeightBuffer b;
    b.dtype = dtype;
    b.shape = std::move(shape);
    b.data = buf.get() + offset;
    b.owner = std::shared_ptr<const void>(buf, buf.get());
    return b;
}

// Work collected while the weights are laid out, then done by run() in one parallel loop (so
// many small per-expert matrices keep every thread busy). Each task fills a part of one tensor:
// dense: values [first, first + n) of its stream as bf16; fp8: one 128-row block row of a matrix
// [rows, cols] whose element (r, c) is stream element base + r·cols + c, rounded to bf16 (so the
// FP8 weights are exactly the quantised BF16 dummy weights) and then quantised.
constexpr int64_t kDenseTask = 16 * kChunk;  // elements per dense task

struct FillJob {
    uint64_t key = 0;
    float a = 0.0f;  // values uniform in [-a, a)
    int64_t base = 0;
    int64_t rows = 0, cols = 0;  // dense: rows = 1, cols = numel
    uint16_t* bf16_out = nullptr;
    uint8_t* fp8_out = nullptr;  // [rows, cols]
    float* scale_out = nullptr;  // [⌈rows/128⌉, ⌈cols/128⌉]
    uint32_t* int4_out = nullptr;     // INT4 instead of fp8: [rows, cols/8] packed codes
    uint16_t* int4_scales = nullptr;  // [rows, cols/128] bf16
    uint8_t* nvfp4_out = nullptr;     // NVFP4 instead of fp8: [rows, cols/2] E2M1 codes
    uint8_t* nvfp4_scales = nullptr;  // [rows, cols/16] E4M3
    float nvfp4_global = 1.0f;
    int64_t num_tasks() const { return bf16_out ? (cols + kDenseTask - 1) / kDenseTask : fp8_num_blocks(rows); }
    // Bytes of weights task t writes (scales left out): what the progress line counts.
    int64_t task_bytes(int64_t t) const {
        return bf16_out ? 2 * std::min(kDenseTask, cols - t * kDenseTask)
                        : std::min(kFp8BlockSize, rows - t * kFp8BlockSize) * cols / (int4_out || nvfp4_out ? 2 : 1);
    }
    int64_t bytes() const { return bf16_out ? 2 * cols : int4_out || nvfp4_out ? rows * cols / 2 : rows * cols; }
};

void run_task(const FillJob& j, int64_t t, std::vector<float>& scratch) {
    if (j.bf16_out) {
        const int64_t first = t * kDenseTask, n = std::min(kDenseTask, j.cols - first);
        scratch.resize(size_t(n));
        fill_stream(j.key, j.base + first, n, -j.a, j.a, scratch.data());
        for (int64_t i = 0; i < n; ++i) j.bf16_out[first + i] = f32_to_bf16(scratch[size_t(i)]).bits;
        return;
    }
    const int64_t r0 = t * kFp8BlockSize, n = std::min(kFp8BlockSize, j.rows - r0);
    scratch.resize(size_t(n * j.cols));
    fill_stream(j.key, j.base + r0 * j.cols, n * j.cols, -j.a, j.a, scratch.data());
    for (float& v : scratch) v = round_to_bf16(v);
    if (j.int4_out) {
        const int64_t g = kInt4DefaultGroupSize;
        QS_CHECK(quantize_int4_rows(scratch.data(), n, j.cols, g, j.int4_out + r0 * (j.cols / 8),
                                    j.int4_scales + r0 * (j.cols / g)));
        return;
    }
    if (j.nvfp4_out) {
        QS_CHECK(quantize_nvfp4_rows(scratch.data(), n, j.cols, j.nvfp4_global, j.nvfp4_out + r0 * (j.cols / 2),
                                     j.nvfp4_scales + r0 * (j.cols / kNvfp4RtnGroupSize)));
        return;
    }
    const bool ok = quantize_fp8_block_row(scratch.data(), n, j.cols, DType::kF32, j.fp8_out + r0 * j.cols,
                                           j.scale_out + t * fp8_num_blocks(j.cols));
    QS_CHECK(ok);
}

// Owned storage of `n` elements of T, as a WeightBuffer owner.
template <typename T>
std::shared_ptr<T[]> storage(int64_t n) {
    return std::shared_ptr<T[]>(new T[size_t(n)]);
}

class DummyFactory {
public:
    DummyFactory(uint64_t seed, WeightFormat format) : seed_(seed), format_(format) {}

    uint64_t key_of(const std::string& name) const { return splitmix64(seed_ ^ name_hash(name)); }

    // BF16 buffer of `shape` with values uniform in [-a, a] (filled by run()).
    WeightBuffer bf16_uniform(const std::string& name, std::vector<int64_t> shape, float a) {
        WeightBuffer b;
        b.dtype = DType::kBF16;
        b.shape = std::move(shape);
        const int64_t n = b.numel();
        auto st = storage<uint16_t>(n);
        FillJob j;
        j.key = key_of(name);
        j.a = a;
        j.rows = 1;
        j.cols = n;
        j.bf16_out = st.get();
        add(j);
        b.data = st.get();
        b.owner = std::shared_ptr<const void>(st, st.get());
        names_.push_back(name);
        return b;
    }

    // An FP8 linear [out, in] made of elements [base, base + out·in) of stream `stream`, codes and
    // scales placed at the given offsets of shared buffers.
    LinearWeight fp8_part(const std::string& stream, int64_t base, int64_t out, int64_t in, float a,
                          const std::shared_ptr<uint8_t[]>& codes, int64_t code_offset,
                          const std::shared_ptr<float[]>& scales, int64_t scale_offset) {
        LinearWeight w;
        w.format = WeightFormat::kFP8Block;
        w.out_features = out;
        w.in_features = in;
        w.weight = slice_of(codes, code_offset, DType::kF8E4M3, {out, in});
        w.scale_inv = slice_of(scales, scale_offset, DType::kF32, {fp8_num_blocks(out), fp8_num_blocks(in)});
        FillJob j;
        j.key = key_of(stream);
        j.a = a;
        j.base = base;
        j.rows = out;
        j.cols = in;
        j.fp8_out = codes.get() + code_offset;
        j.scale_out = scales.get() + scale_offset;
        add(j);
        return w;
    }

    // An INT4 W4A16 linear [out, in] made of elements [base, base + out·in) of stream `stream`
    // (compressed-tensors pack-quantized, group 128), codes and scales at the given offsets of
    // shared buffers.
    LinearWeight int4_part(const std::string& stream, int64_t base, int64_t out, int64_t in, float a,
                           const std::shared_ptr<uint32_t[]>& codes, int64_t code_offset,
                           const std::shared_ptr<uint16_t[]>& scales, int64_t scale_offset) {
        const int64_t g = kInt4DefaultGroupSize;
        QS_CHECK_MSG(in % g == 0, "int4-w4a16 dummy weights need in_features divisible by 128");
        LinearWeight w;
        w.format = WeightFormat::kIntGroup;
        w.out_features = out;
        w.in_features = in;
        w.int_params.packing = IntPacking::kCompressed;
        w.int_params.bits = 4;
        w.int_params.group_size = g;
        w.weight = slice_of(codes, code_offset, DType::kI32, {out, in / 8});
        w.scales = slice_of(scales, scale_offset, DType::kBF16, {out, in / g});
        FillJob j;
        j.key = key_of(stream);
        j.a = a;
        j.base = base;
        j.rows = out;
        j.cols = in;
        j.int4_out = codes.get() + code_offset;
        j.int4_scales = scales.get() + scale_offset;
        add(j);
        return w;
    }

    // An NVFP4 linear [out, in] made of elements [base, base + out·in) of stream `stream`
    // (compressed-tensors nvfp4-pack-quantized, as `quantize --format nvfp4` writes it), codes and
    // scales at the given offsets of shared buffers. The global scale is the quantiser's for an
    // absolute maximum of a (the values' bound: per-chunk generation never sees the whole tensor).
    LinearWeight nvfp4_part(const std::string& stream, int64_t base, int64_t out, int64_t in, float a,
                            const std::shared_ptr<uint8_t[]>& codes, int64_t code_offset,
                            const std::shared_ptr<uint8_t[]>& scales, int64_t scale_offset) {
        QS_CHECK_MSG(in % kNvfp4RtnGroupSize == 0, "nvfp4 dummy weights need in_features divisible by 16");
        LinearWeight w;
        w.format = WeightFormat::kNvfp4;
        w.out_features = out;
        w.in_features = in;
        w.weight = slice_of(codes, code_offset, DType::kU8, {out, in / 2});
        w.scales = slice_of(scales, scale_offset, DType::kF8E4M3, {out, in / kNvfp4RtnGroupSize});
        w.global_scale = nvfp4_global_scale(a);
        w.nvfp4_global = Nvfp4Global::kDivide;
        FillJob j;
        j.key = key_of(stream);
        j.a = a;
        j.base = base;
        j.rows = out;
        j.cols = in;
        j.nvfp4_out = codes.get() + code_offset;
        j.nvfp4_scales = scales.get() + scale_offset;
        j.nvfp4_global = w.global_scale;
        add(j);
        return w;
    }

    // Whether `module` is stored quantised in this format (FP8 blocks, INT4 or NVFP4).
    bool quantized(const std::string& module) const {
        if (format_ == WeightFormat::kFP8Block) return fp8_role(module) == Fp8Role::kQuantized;
        if (format_ == WeightFormat::kIntGroup || format_ == WeightFormat::kNvfp4) return low_bit_quantized(module);
        return false;
    }

    // A linear with std = gain / sqrt(in): uniform bound a = std * sqrt(3). FP8 or INT4 when the
    // format asks for it and the module is one that format quantises.
    LinearWeight linear(const std::string& name, int64_t out, int64_t in, float gain = 1.0f) {
        const float a = gain * std::sqrt(3.0f / float(in));
        if (!quantized(name.substr(0, name.size() - 7))) {
            LinearWeight w;
            w.out_features = out;
            w.in_features = in;
            w.weight = bf16_uniform(name, {out, in}, a);
            return w;
        }
        names_.push_back(name);
        if (format_ == WeightFormat::kIntGroup)
            return int4_part(name, 0, out, in, a, storage<uint32_t>(out * in / 8), 0,
                             storage<uint16_t>(out * (in / kInt4DefaultGroupSize)), 0);
        if (format_ == WeightFormat::kNvfp4)
            return nvfp4_part(name, 0, out, in, a, storage<uint8_t>(out * in / 2), 0,
                              storage<uint8_t>(out * (in / kNvfp4RtnGroupSize)), 0);
        return fp8_part(name, 0, out, in, a, storage<uint8_t>(out * in), 0,
                        storage<float>(fp8_num_blocks(out) * fp8_num_blocks(in)), 0);
    }

    std::vector<float> vec(const std::string& name, int64_t n, float lo, float hi) {
        std::vector<float> v(static_cast<size_t>(n));
        fill_stream(key_of(name), 0, n, lo, hi, v.data());
        return v;
    }

    // Runs every collected job: one parallel loop over all tasks, with a progress line (the
    // full-size model's weights take minutes).
    void run() {
        std::vector<int64_t> starts = {0};  // [jobs + 1] first task of each job
        double total_bytes = 0;
        for (const FillJob& j : jobs_) {
            starts.push_back(starts.back() + j.num_tasks());
            total_bytes += double(j.bytes());
        }
        const int64_t total = starts.back();
        Progress progress("making dummy weights", total_bytes);
#pragma omp parallel
        {
            std::vector<float> scratch;
#pragma omp for schedule(dynamic, 1)
            for (int64_t t = 0; t < total; ++t) {
                const size_t j = size_t(std::upper_bound(starts.begin(), starts.end(), t) - starts.begin() - 1);
                run_task(jobs_[j], t - starts[j], scratch);
                progress.advance(double(jobs_[j].task_bytes(t - starts[j])));
            }
        }
        progress.finish();
        jobs_.clear();
    }

    const std::vector<std::string>& names() const { return names_; }
    WeightFormat format() const { return format_; }

private:
    void add(const FillJob& j) {
        if (j.num_tasks() > 0) jobs_.push_back(j);
    }

    uint64_t seed_;
    WeightFormat format_;
    std::vector<FillJob> jobs_;
    std::vector<std::string> names_;  // tensor names of the linears and buffers made
};

constexpr float kOutGain = 0.5f;  // output projections: residual grows ~sqrt(layers)/2

void make_moe(DummyFactory& f, const std::string& p, const ModelConfig& c, MoeWeights& moe) {
    const int64_t H = c.hidden_size, E = c.num_experts, I = c.moe_intermediate_size;
    moe.router = f.linear(p + "mlp.gate.weight", E, H);
    moe.experts.resize(static_cast<size_t>(E));
    const std::string gate_up_name = p + "mlp.experts.gate_up_proj", down_name = p + "mlp.experts.down_proj";
    const float gate_up_a = std::sqrt(3.0f / float(H)), down_a = kOutGain * std::sqrt(3.0f / float(I));
    // A 4-bit format (INT4 or NVFP4): the fused BF16 tensors' values quantised per expert matrix,
    // as FP8 below; codes of type C hold per_code inputs each, scales of type S one per g inputs.
    auto four_bit_experts = [&](auto code_type, auto scale_type, int64_t per_code, int64_t g, auto part) {
        using C = decltype(code_type);
        using S = decltype(scale_type);
        auto gate_up_codes = storage<C>(E * 2 * I * H / per_code);
        auto down_codes = storage<C>(E * H * I / per_code);
        auto gate_up_sc = storage<S>(E * 2 * I * (H / g));
        auto down_sc = storage<S>(E * H * (I / g));
        for (int64_t e = 0; e < E; ++e) {
            ExpertWeights& x = moe.experts[size_t(e)];
            const int64_t o = e * 2 * I * H;
            x.gate_proj = part(gate_up_name, o, I, H, gate_up_a, gate_up_codes, o / per_code, gate_up_sc, o / g);
            x.up_proj = part(gate_up_name, o + I * H, I, H, gate_up_a, gate_up_codes, (o + I * H) / per_code,
                             gate_up_sc, (o + I * H) / g);
            x.down_proj = part(down_name, e * H * I, H, I, down_a, down_codes, e * H * I / per_code, down_sc,
                               e * H * I / g);
        }
    };
    if (f.format() == WeightFormat::kIntGroup && f.quantized(gate_up_name)) {
        four_bit_experts(uint32_t{}, uint16_t{}, 8, kInt4DefaultGroupSize,
                         [&](auto&&... args) { return f.int4_part(args...); });
    } else if (f.format() == WeightFormat::kNvfp4 && f.quantized(gate_up_name)) {
        // Each expert matrix with its own global scale.
        four_bit_experts(uint8_t{}, uint8_t{}, 2, kNvfp4RtnGroupSize,
                         [&](auto&&... args) { return f.nvfp4_part(args...); });
    } else if (f.quantized(gate_up_name)) {
        // The values of the fused BF16 tensors, quantised per expert matrix (the official FP8
        // checkpoints store experts per expert); codes laid out as the fused tensors.
        const int64_t gate_scales = fp8_num_blocks(I) * fp8_num_blocks(H);
        const int64_t down_scales = fp8_num_blocks(H) * fp8_num_blocks(I);
        auto gate_up_codes = storage<uint8_t>(E * 2 * I * H);
        auto down_codes = storage<uint8_t>(E * H * I);
        auto gate_up_sc = storage<float>(E * 2 * gate_scales);
        auto down_sc = storage<float>(E * down_scales);
        for (int64_t e = 0; e < E; ++e) {
            ExpertWeights& x = moe.experts[size_t(e)];
            const int64_t g = e * 2 * I * H;
            x.gate_proj = f.fp8_part(gate_up_name, g, I, H, gate_up_a, gate_up_codes, g, gate_up_sc, e * 2 * gate_scales);
            x.up_proj = f.fp8_part(gate_up_name, g + I * H, I, H, gate_up_a, gate_up_codes, g + I * H, gate_up_sc,
                                   (e * 2 + 1) * gate_scales);
            x.down_proj = f.fp8_part(down_name, e * H * I, H, I, down_a, down_codes, e * H * I, down_sc, e * down_scales);
        }
    } else {
        WeightBuffer gate_up = f.bf16_uniform(gate_up_name, {E, 2 * I, H}, gate_up_a);
        WeightBuffer down = f.bf16_uniform(down_name, {E, H, I}, down_a);
        for (int64_t e = 0; e < E; ++e) {
            ExpertWeights& x = moe.experts[size_t(e)];
            x.gate_proj = dense_linear(I, H, gate_up.slice(e * 2 * I * H, {I, H}));
            x.up_proj = dense_linear(I, H, gate_up.slice(e * 2 * I * H + I * H, {I, H}));
            x.down_proj = dense_linear(H, I, down.slice(e * H * I, {H, I}));
        }
    }
    const int64_t Is = c.shared_expert_intermediate_size;
    moe.shared_expert.gate_proj = f.linear(p + "mlp.shared_expert.gate_proj.weight", Is, H);
    moe.shared_expert.up_proj = f.linear(p + "mlp.shared_expert.up_proj.weight", Is, H);
    moe.shared_expert.down_proj = f.linear(p + "mlp.shared_expert.down_proj.weight", H, Is, kOutGain);
    moe.shared_expert_gate = f.linear(p + "mlp.shared_expert_gate.weight", 1, H);
}

void make_layer(DummyFactory& f, const std::string& p, const ModelConfig& c, LayerType type,
                DecoderLayerWeights& l) {
    const int64_t H = c.hidden_size;
    l.type = type;
    l.input_layernorm = f.vec(p + "input_layernorm.weight", H, -0.1f, 0.1f);
    l.post_attention_layernorm = f.vec(p + "post_attention_layernorm.weight", H, -0.1f, 0.1f);
    if (type == LayerType::kFullAttention) {
        AttentionWeights& a = l.attn;
        const int64_t D = c.head_dim, kv = c.num_key_value_heads * D;
        a.q_proj = f.linear(p + "self_attn.q_proj.weight", c.q_proj_out(), H);
        a.k_proj = f.linear(p + "self_attn.k_proj.weight", kv, H);
        a.v_proj = f.linear(p + "self_attn.v_proj.weight", kv, H);
        a.o_proj = f.linear(p + "self_attn.o_proj.weight", H, c.num_attention_heads * D, kOutGain);
        a.q_norm = f.vec(p + "self_attn.q_norm.weight", D, -0.1f, 0.1f);
        a.k_norm = f.vec(p + "self_attn.k_norm.weight", D, -0.1f, 0.1f);
    } else {
        GdnWeights& g = l.gdn;
        const int64_t Nv = c.linear_num_value_heads, K = c.linear_conv_kernel_dim;
        g.in_proj_qkv = f.linear(p + "linear_attn.in_proj_qkv.weight", c.linear_conv_dim(), H);
        g.in_proj_z = f.linear(p + "linear_attn.in_proj_z.weight", c.linear_value_dim(), H);
        g.in_proj_b = f.linear(p + "linear_attn.in_proj_b.weight", Nv, H);
        g.in_proj_a = f.linear(p + "linear_attn.in_proj_a.weight", Nv, H);
        g.out_proj = f.linear(p + "linear_attn.out_proj.weight", H, c.linear_value_dim(), kOutGain);
        const float conv_a = std::sqrt(3.0f / float(K));
        g.conv1d = f.vec(p + "linear_attn.conv1d.weight", c.linear_conv_dim() * K, -conv_a, conv_a);
        // A = exp(A_log) in [1, 16] as in the reference initialisation.
        g.A_log = f.vec(p + "linear_attn.A_log", Nv, 0.0f, std::log(16.0f));
        // dt_bias = softplus⁻¹(dt) with dt in [0.001, 0.1].
        g.dt_bias = f.vec(p + "linear_attn.dt_bias", Nv, 0.001f, 0.1f);
        for (float& d : g.dt_bias) d = d + std::log(-std::expm1(-d));
        g.norm = f.vec(p + "linear_attn.norm.weight", c.linear_value_head_dim, 0.9f, 1.1f);
    }
    make_moe(f, p, c, l.moe);
}

}  // namespace

ModelWeights make_dummy_weights(const ModelConfig& c, uint64_t seed, bool with_mtp, WeightFormat format) {
    DummyFactory f(seed, format);
    ModelWeights w;
    w.config = c;
    const int64_t H = c.hidden_size;
    w.embed_tokens = f.bf16_uniform("model.language_model.embed_tokens.weight", {c.vocab_size, H}, std::sqrt(3.0f));
    w.layers.resize(size_t(c.num_hidden_layers));
    for (int64_t i = 0; i < c.num_hidden_layers; ++i)
        make_layer(f, fmt::format("model.language_model.layers.{}.", i), c, c.layer_types[size_t(i)], w.layers[size_t(i)]);
    w.norm = f.vec("model.language_model.norm.weight", H, -0.1f, 0.1f);
    w.lm_head = f.linear("lm_head.weight", c.vocab_size, H);
    if (with_mtp && c.mtp_num_hidden_layers > 0) {
        MtpWeights& m = w.mtp;
        m.present = true;
        m.pre_fc_norm_embedding = f.vec("mtp.pre_fc_norm_embedding.weight", H, -0.1f, 0.1f);
        m.pre_fc_norm_hidden = f.vec("mtp.pre_fc_norm_hidden.weight", H, -0.1f, 0.1f);
        m.fc = f.linear("mtp.fc.weight", H, 2 * H);
        make_layer(f, "mtp.layers.0.", c, LayerType::kFullAttention, m.layer);
        m.norm = f.vec("mtp.norm.weight", H, -0.1f, 0.1f);
    }
    f.run();
    // The config describes the weights made: FP8 and INT4 ones carry the quantization_config a
    // checkpoint of them would have.
    if (format == WeightFormat::kFP8Block) {
        w.config.quantization = fp8_block_quantization(fp8_unconverted_modules(f.names()));
    } else if (format == WeightFormat::kIntGroup) {
        auto q = parse_quantization_config(
            low_bit_quantization_config(LowBitFormat::kInt4W4A16, kInt4DefaultGroupSize, low_bit_ignore(f.names())),
            "int4-w4a16 dummy weights");
        QS_CHECK_MSG(q.is_ok(), "int4-w4a16 dummy weights: quantization_config does not parse");
        w.config.quantization = std::move(q).value();
    } else if (format == WeightFormat::kNvfp4) {
        auto q = parse_quantization_config(
            low_bit_quantization_config(LowBitFormat::kNvfp4, kNvfp4RtnGroupSize, low_bit_ignore(f.names())),
            "nvfp4 dummy weights");
        QS_CHECK_MSG(q.is_ok(), "nvfp4 dummy weights: quantization_config does not parse");
        w.config.quantization = std::move(q).value();
    } else {
        w.config.quantization = QuantizationConfig{};
    }
    return w;
}

ModelWeights make_shape_only_weights(const ModelConfig& config, bool with_mtp) {
    ModelWeights w;
    w.config = config;
    w.layers.resize(config.layer_types.size());
    for (size_t i = 0; i < w.layers.size(); ++i) w.layers[i].type = config.layer_types[i];
    w.mtp.present = with_mtp;
    w.mtp.layer.type = LayerType::kFullAttention;
    return w;
}

}  // namespace qs

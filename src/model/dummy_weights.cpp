// Random weights of a config's shapes (`--load-format dummy`). Deterministic by seed: every
// tensor is filled from a counter-based generator keyed by (seed, tensor name, chunk index), so
// values do not depend on thread count or load order. Scales keep activations O(1): each linear
// has std ≈ gain/sqrt(in_features), output projections use a smaller gain so the residual stream
// grows slowly over 40 layers, zero-centred norm weights are near 0 (scale ≈ 1).
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <functional>

#include "model/weights.h"

namespace qs {

namespace {

uint64_t splitmix64(uint64_t x) {
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

uint64_t name_hash(const std::string& s) {
    uint64_t h = 1469598103934665603ull;  // FNV-1a
    for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
    return h;
}

// Values come in chunks of kChunk elements; chunk c of a tensor keyed by `key` is the splitmix64
// sequence started at splitmix64(key ^ c), so any thread can fill any chunk.
constexpr int64_t kChunk = 4096;

inline float to_unit(uint64_t r) { return float(r >> 40) * (1.0f / 16777216.0f); }

// Fills out[0, n) (n <= kChunk) with uniform values in [lo, hi) for chunk c of stream `key`.
template <typename Store>
void fill_chunk(uint64_t key, int64_t c, int64_t n, float lo, float hi, Store store) {
    uint64_t state = splitmix64(key ^ uint64_t(c));
    for (int64_t i = 0; i < n; ++i) {
        state += 0x9e3779b97f4a7c15ull;
        uint64_t z = state;
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
        store(i, lo + (hi - lo) * to_unit(z ^ (z >> 31)));
    }
}

class DummyFactory {
public:
    explicit DummyFactory(uint64_t seed) : seed_(seed) {}

    // BF16 buffer of `shape` with values uniform in [-a, a].
    WeightBuffer bf16_uniform(const std::string& name, std::vector<int64_t> shape, float a) {
        WeightBuffer b;
        b.dtype = DType::kBF16;
        b.shape = std::move(shape);
        const int64_t n = b.numel();
        auto storage = std::shared_ptr<uint16_t[]>(new uint16_t[size_t(n)]);
        const uint64_t key = splitmix64(seed_ ^ name_hash(name));
        uint16_t* out = storage.get();
        const int64_t num_chunks = (n + kChunk - 1) / kChunk;
#pragma omp parallel for schedule(static)
        for (int64_t c = 0; c < num_chunks; ++c) {
            uint16_t* dst = out + c * kChunk;
            fill_chunk(key, c, std::min(kChunk, n - c * kChunk), -a, a,
                       [dst](int64_t i, float v) { dst[i] = f32_to_bf16(v).bits; });
        }
        b.data = out;
        b.owner = std::shared_ptr<const void>(storage, storage.get());
        return b;
    }

    // A linear with std = gain / sqrt(in): uniform bound a = std * sqrt(3).
    LinearWeight linear(const std::string& name, int64_t out, int64_t in, float gain = 1.0f) {
        float a = gain * std::sqrt(3.0f / float(in));
        return {WeightFormat::kDense, out, in, bf16_uniform(name, {out, in}, a)};
    }

    std::vector<float> vec(const std::string& name, int64_t n, float lo, float hi) {
        std::vector<float> v(static_cast<size_t>(n));
        const uint64_t key = splitmix64(seed_ ^ name_hash(name));
        for (int64_t c = 0; c * kChunk < n; ++c) {
            float* dst = v.data() + c * kChunk;
            fill_chunk(key, c, std::min(kChunk, n - c * kChunk), lo, hi, [dst](int64_t i, float x) { dst[i] = x; });
        }
        return v;
    }

private:
    uint64_t seed_;
};

constexpr float kOutGain = 0.5f;  // output projections: residual grows ~sqrt(layers)/2

void make_moe(DummyFactory& f, const std::string& p, const ModelConfig& c, MoeWeights& moe) {
    const int64_t H = c.hidden_size, E = c.num_experts, I = c.moe_intermediate_size;
    moe.router = f.linear(p + "mlp.gate.weight", E, H);
    WeightBuffer gate_up = f.bf16_uniform(p + "mlp.experts.gate_up_proj", {E, 2 * I, H}, std::sqrt(3.0f / float(H)));
    WeightBuffer down = f.bf16_uniform(p + "mlp.experts.down_proj", {E, H, I}, kOutGain * std::sqrt(3.0f / float(I)));
    moe.experts.resize(static_cast<size_t>(E));
    for (int64_t e = 0; e < E; ++e) {
        ExpertWeights& x = moe.experts[size_t(e)];
        x.gate_proj = {WeightFormat::kDense, I, H, gate_up.slice(e * 2 * I * H, {I, H})};
        x.up_proj = {WeightFormat::kDense, I, H, gate_up.slice(e * 2 * I * H + I * H, {I, H})};
        x.down_proj = {WeightFormat::kDense, H, I, down.slice(e * H * I, {H, I})};
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

ModelWeights make_dummy_weights(const ModelConfig& c, uint64_t seed, bool with_mtp) {
    DummyFactory f(seed);
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
    return w;
}

}  // namespace qs

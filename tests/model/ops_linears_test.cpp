// Ops::linears' default (backend/ops.cpp), the specification the CUDA backend's shared-input
// version is held to (tests/gpu/cuda_shared_linears_test.cpp): one linear() per output, in order,
// each output what that linear writes; and the model's forward goes through it for attention
// q/k/v and GDN in_proj qkv/z/b/a (the layers' input projections, seven calls per pair of layers).
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "backend/cpu/cpu_ops.h"
#include "config/model_config.h"
#include "model/single_sequence.h"
#include "model/weights.h"

using namespace qs;

namespace {

class LinearCountingOps final : public CpuOps {
public:
    void linear(const float* x, int64_t T, const LinearWeight& w, float* y) override {
        order.push_back(&w);
        CpuOps::linear(x, T, w, y);
    }
    void linears(const float* x, int64_t T, std::initializer_list<LinearOut> outs) override {
        ++linears_calls;
        linears_outputs += int64_t(outs.size());
        CpuOps::linears(x, T, outs);
    }
    std::vector<const LinearWeight*> order;
    int64_t linears_calls = 0, linears_outputs = 0;
};

TEST(OpsLinears, DefaultIsOneLinearPerOutputInOrder) {
    const ModelConfig c = tiny_model_config();
    ModelWeights w = make_dummy_weights(c, 5, /*with_mtp=*/false);
    const GdnWeights* gdn = nullptr;
    for (const auto& l : w.layers)
        if (l.type == LayerType::kLinearAttention) gdn = &l.gdn;
    ASSERT_TRUE(gdn);
    const int64_t T = 3, H = c.hidden_size;
    std::mt19937 rng{1};
    std::normal_distribution<float> nd(0.0f, 1.0f);
    std::vector<float> x(size_t(T * H));
    for (float& v : x) v = nd(rng);
    const std::vector<const LinearWeight*> ws = {&gdn->in_proj_qkv, &gdn->in_proj_z, &gdn->in_proj_b,
                                                 &gdn->in_proj_a};
    std::vector<std::vector<float>> together(ws.size()), alone(ws.size());
    LinearCountingOps ops;
    for (size_t i = 0; i < ws.size(); ++i) {
        together[i].assign(size_t(T * ws[i]->out_features), NAN);
        alone[i].assign(size_t(T * ws[i]->out_features), NAN);
        ops.CpuOps::linear(x.data(), T, *ws[i], alone[i].data());
    }
    ops.linears(x.data(), T,
                {{*ws[0], together[0].data()}, {*ws[1], together[1].data()}, {*ws[2], together[2].data()},
                 {*ws[3], together[3].data()}});
    ASSERT_EQ(ops.order, ws);
    for (size_t i = 0; i < ws.size(); ++i)
        EXPECT_EQ(std::memcmp(together[i].data(), alone[i].data(), together[i].size() * 4), 0) << "output " << i;
}

TEST(OpsLinears, ForwardProjectsEachLayerInputThroughIt) {
    const ModelConfig c = tiny_model_config();
    ModelWeights w = make_dummy_weights(c, 6, /*with_mtp=*/false);
    LinearCountingOps ops;
    Qwen36Model model(w, ops);
    SingleSequence seq(model, 8);
    seq.feed({1, 2, 3}, true);
    int64_t attention = 0, gdn = 0;
    for (const auto& l : w.layers) (l.type == LayerType::kFullAttention ? attention : gdn) += 1;
    EXPECT_EQ(ops.linears_calls, attention + gdn);
    EXPECT_EQ(ops.linears_outputs, 3 * attention + 4 * gdn);
}

// The layer's input norm and its projections (Ops::rms_norm_linears; the CUDA backend may run them
// as one launch, tests/gpu/cuda_fused_input_norm_test.cpp holds it to this default): h is
// rms_norm_zc of x + pending (host fp32 sums), each output the linear of h, x and pending unchanged;
// and add2_rms_norm_zc is (x + y1) + y2 then the norm, the sum kept in x.
TEST(OpsLinears, RmsNormLinearsIsTheNormThenLinears) {
    const ModelConfig c = tiny_model_config();
    ModelWeights w = make_dummy_weights(c, 8, /*with_mtp=*/false);
    const DecoderLayerWeights* layer = nullptr;
    for (const auto& l : w.layers)
        if (l.type == LayerType::kLinearAttention) layer = &l;
    ASSERT_TRUE(layer);
    const GdnWeights& gdn = layer->gdn;
    const int64_t T = 3, H = c.hidden_size;
    std::mt19937 rng{2};
    std::normal_distribution<float> nd(0.0f, 1.0f);
    std::vector<float> x(size_t(T * H)), pending(x.size());
    for (float& v : x) v = 2.0f * nd(rng);
    for (float& v : pending) v = nd(rng);
    const std::vector<float> x0 = x, pending0 = pending;
    CpuOps ops;
    for (const bool with_pending : {false, true}) {
        std::vector<float> sum = x;
        if (with_pending)
            for (size_t i = 0; i < sum.size(); ++i) sum[i] += pending[i];
        std::vector<float> h_ref(sum.size()), qkv_ref(size_t(T * gdn.in_proj_qkv.out_features));
        std::vector<float> b_ref(size_t(T * gdn.in_proj_b.out_features));
        ops.rms_norm_zc(sum.data(), layer->input_layernorm, T, H, c.rms_norm_eps, h_ref.data());
        ops.linear(h_ref.data(), T, gdn.in_proj_qkv, qkv_ref.data());
        ops.linear(h_ref.data(), T, gdn.in_proj_b, b_ref.data());
        std::vector<float> h(sum.size(), NAN), qkv(qkv_ref.size(), NAN), b(b_ref.size(), NAN);
        ops.rms_norm_linears(x.data(), with_pending ? pending.data() : nullptr, layer->input_layernorm, T, H,
                             c.rms_norm_eps, h.data(), {{gdn.in_proj_qkv, qkv.data()}, {gdn.in_proj_b, b.data()}});
        EXPECT_EQ(h, h_ref) << "pending " << with_pending;
        EXPECT_EQ(qkv, qkv_ref) << "pending " << with_pending;
        EXPECT_EQ(b, b_ref) << "pending " << with_pending;
        EXPECT_EQ(x, x0);
        EXPECT_EQ(pending, pending0);
    }
    for (const bool with_y1 : {false, true}) {
        std::vector<float> sum = x;
        for (size_t i = 0; i < sum.size(); ++i) sum[i] = with_y1 ? (x[i] + pending[i]) + x0[i] : x[i] + x0[i];
        std::vector<float> ref(sum.size());
        ops.rms_norm_zc(sum.data(), layer->post_attention_layernorm, T, H, c.rms_norm_eps, ref.data());
        std::vector<float> xs = x, out(sum.size(), NAN);
        ops.add2_rms_norm_zc(xs.data(), with_y1 ? pending.data() : nullptr, x0.data(), layer->post_attention_layernorm,
                             T, H, c.rms_norm_eps, out.data());
        EXPECT_EQ(out, ref) << "y1 " << with_y1;
        EXPECT_EQ(xs, sum) << "y1 " << with_y1 << ": the sum kept in x";
    }
}

// The output projection and the post-attention norm (Ops::linear_add2_rms_norm_zc; the CUDA
// backend may run the norm in the projection's launch): y the linear's, x = (x + pending) + y, h its
// norm, a unchanged.
TEST(OpsLinears, LinearAdd2IsTheLinearThenTheNorm) {
    const ModelConfig c = tiny_model_config();
    ModelWeights w = make_dummy_weights(c, 10, /*with_mtp=*/false);
    const DecoderLayerWeights& l = w.layers[0];
    const LinearWeight& W = l.type == LayerType::kFullAttention ? l.attn.o_proj : l.gdn.out_proj;
    const int64_t T = 2, H = c.hidden_size;
    ASSERT_EQ(W.out_features, H);
    std::mt19937 rng{3};
    std::normal_distribution<float> nd(0.0f, 1.0f);
    std::vector<float> a(size_t(T * W.in_features)), x(size_t(T * H)), pending(x.size());
    for (float& v : a) v = nd(rng);
    for (float& v : x) v = 2.0f * nd(rng);
    for (float& v : pending) v = nd(rng);
    CpuOps ops;
    std::vector<float> y_ref(x.size()), h_ref(x.size()), x_ref = x;
    ops.linear(a.data(), T, W, y_ref.data());
    for (size_t i = 0; i < x_ref.size(); ++i) x_ref[i] = (x_ref[i] + pending[i]) + y_ref[i];
    ops.rms_norm_zc(x_ref.data(), l.post_attention_layernorm, T, H, c.rms_norm_eps, h_ref.data());
    const std::vector<float> a0 = a;
    std::vector<float> y(x.size(), NAN), h(x.size(), NAN), xs = x;
    ops.linear_add2_rms_norm_zc(a.data(), T, W, y.data(), xs.data(), pending.data(), l.post_attention_layernorm,
                                c.rms_norm_eps, h.data());
    EXPECT_EQ(y, y_ref);
    EXPECT_EQ(xs, x_ref);
    EXPECT_EQ(h, h_ref);
    EXPECT_EQ(a, a0);
}

class NormCountingOps final : public CpuOps {
public:
    void rms_norm_linears(const float* x, const float* pending, const ParamVector& w, int64_t T, int64_t n, double eps,
                          float* h, std::initializer_list<LinearOut> outs) override {
        ++input_norms;
        with_pending += pending != nullptr ? 1 : 0;
        CpuOps::rms_norm_linears(x, pending, w, T, n, eps, h, outs);
    }
    void add2_rms_norm_zc(float* x, const float* y1, const float* y2, const ParamVector& w, int64_t T, int64_t n,
                          double eps, float* out) override {
        ++post_norms;
        CpuOps::add2_rms_norm_zc(x, y1, y2, w, T, n, eps, out);
    }
    void linear_add2_rms_norm_zc(const float* a, int64_t T, const LinearWeight& W, float* y, float* x,
                                 const float* pending, const ParamVector& norm_w, double eps, float* h) override {
        ++mixer_out_norms;
        CpuOps::linear_add2_rms_norm_zc(a, T, W, y, x, pending, norm_w, eps, h);
    }
    int64_t input_norms = 0, with_pending = 0, post_norms = 0, mixer_out_norms = 0;
};

// Every layer's input norm goes through rms_norm_linears (all but the first with the previous
// layer's MoE output pending), its output projection and post-attention norm through
// linear_add2_rms_norm_zc, whose default runs add2_rms_norm_zc.
TEST(OpsLinears, ForwardNormsEachLayerInputThroughIt) {
    const ModelConfig c = tiny_model_config();
    ModelWeights w = make_dummy_weights(c, 9, /*with_mtp=*/false);
    NormCountingOps ops;
    Qwen36Model model(w, ops);
    SingleSequence seq(model, 8);
    seq.feed({1, 2, 3}, true);
    const int64_t L = int64_t(w.layers.size());
    EXPECT_EQ(ops.input_norms, L);
    EXPECT_EQ(ops.with_pending, L - 1);
    EXPECT_EQ(ops.post_norms, L);
    EXPECT_EQ(ops.mixer_out_norms, L);
}

}  // namespace

// Ops::linear_leading_rows' default: a linear over leading_rows(w, rows), each output the same
// dot product as the whole linear's, so y is bitwise its first `rows` columns; FP8 blocks cut
// inside a 128-row block too. Packed integer and NVFP4 weights are not row-major prefixes.
TEST(OpsLinears, LeadingRowsAreTheWholeLinearsFirstOutputs) {
    const ModelConfig c = tiny_model_config();
    const ModelWeights dense = make_dummy_weights(c, 5, /*with_mtp=*/true);
    const ModelWeights fp8 = make_dummy_weights(c, 5, /*with_mtp=*/true, WeightFormat::kFP8Block);
    const LinearWeight* fp8_w = nullptr;  // the widest FP8 linear of the tiny model
    for (const auto& l : fp8.layers)
        for (const LinearWeight* x : {&l.gdn.in_proj_qkv, &l.attn.q_proj})
            if (x->format == WeightFormat::kFP8Block && (!fp8_w || x->out_features > fp8_w->out_features)) fp8_w = x;
    ASSERT_TRUE(fp8_w);
    CpuOps ops;
    std::mt19937 rng{3};
    std::normal_distribution<float> nd(0.0f, 1.0f);
    for (const LinearWeight* w : {&dense.lm_head, fp8_w}) {
        ASSERT_TRUE(leading_rows_supported(*w));
        const int64_t T = 3, in = w->in_features, out = w->out_features;
        std::vector<float> x(size_t(T * in)), whole(size_t(T * out));
        for (float& v : x) v = nd(rng);
        ops.linear(x.data(), T, *w, whole.data());
        for (int64_t rows : {int64_t(1), out / 2 + 1, out}) {
            std::vector<float> y(size_t(T * rows), NAN);
            ops.linear_leading_rows(x.data(), T, *w, rows, y.data());
            for (int64_t t = 0; t < T; ++t)
                for (int64_t o = 0; o < rows; ++o)
                    ASSERT_EQ(y[size_t(t * rows + o)], whole[size_t(t * out + o)])
                        << weight_format_name(w->format) << " rows " << rows << " t " << t << " o " << o;
        }
    }
    LinearWeight packed = *fp8_w;
    packed.format = WeightFormat::kIntGroup;
    EXPECT_FALSE(leading_rows_supported(packed));
    packed.format = WeightFormat::kNvfp4;
    EXPECT_FALSE(leading_rows_supported(packed));
}

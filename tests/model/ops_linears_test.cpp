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

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

// Dummy weights: deterministic by seed, independent of thread count, and scaled so the real
// Qwen3.6-35B-A3B shapes keep activations finite and O(1) (layers 0..3 on a few tokens).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "backend/cpu/cpu_ops.h"
#include "model/single_sequence.h"

using namespace qs;

TEST(DummyWeights, DeterministicBySeed) {
    const ModelConfig c = tiny_model_config();
    ModelWeights a = make_dummy_weights(c, 5), b = make_dummy_weights(c, 5), d = make_dummy_weights(c, 6);
    const auto& wa = a.layers[0].gdn.in_proj_qkv.weight;
    const auto& wb = b.layers[0].gdn.in_proj_qkv.weight;
    const auto& wd = d.layers[0].gdn.in_proj_qkv.weight;
    const size_t n = size_t(wa.numel()) * dtype_size(wa.dtype);
    EXPECT_EQ(std::memcmp(wa.data, wb.data, n), 0);
    EXPECT_NE(std::memcmp(wa.data, wd.data, n), 0);
    EXPECT_EQ(a.layers[0].gdn.A_log, b.layers[0].gdn.A_log);
}

TEST(DummyWeights, RealShapeLayers0To3StayFinite) {
    ModelConfig c = qwen36_35b_a3b_config();
    c.num_hidden_layers = 4;  // layers 0..3: three GDN layers and one full-attention layer
    c.layer_types.resize(4);
    ModelWeights w = make_dummy_weights(c, 1, /*with_mtp=*/false);
    CpuOps ops;
    Qwen36Model model(w, ops);
    SingleSequence seq(model, 8);
    std::vector<float> logits = seq.feed({1, 1000, 248044, 5}, /*all_rows=*/true);
    ASSERT_EQ(logits.size(), size_t(4 * c.vocab_size));
    double sum_sq = 0.0;
    for (float x : logits) {
        ASSERT_TRUE(std::isfinite(x));
        sum_sq += double(x) * x;
    }
    const double rms = std::sqrt(sum_sq / double(logits.size()));
    EXPECT_GT(rms, 0.1);   // not collapsed to zero
    EXPECT_LT(rms, 100.0); // not blown up
}

// The op profiler (backend/cuda/op_profile.h) on the trained tiny model: one forward counts each
// top-level op once per call the model makes (expected counts from the config's layer types, the
// spec's layer structure), ops called inside another op (moe's router linear) are not counted
// twice, every time is positive, and take() starts afresh.
#include <gtest/gtest.h>

#include "gpu_test_util.h"
#include "model/qwen36.h"
#include "model/single_sequence.h"

using namespace qs;

namespace {

// One forward of the tiny model with the profiler on; CudaOptions::shared_linear_input decides
// whether q/k/v and GDN qkv/z/b/a are one "linears" entry per layer or a "linear" entry each.
void count_ops(ModelWeights& weights, int shared) {
    const ModelConfig& c = weights.config;
    cuda::CudaOptions o;
    o.profile_ops = true;
    o.shared_linear_input = shared;
    cuda::CudaOps ops(o);
    ops.prepare_weights(weight_set(weights));
    Qwen36Model model(weights, ops);
    SingleSequence seq(model, 16, KvCacheDtype::kBF16);
    ops.take_op_profile();
    seq.feed({1, 2, 3, 4, 5}, false);
    const auto p = ops.take_op_profile();
    int64_t attn = 0, gdn = 0;
    for (LayerType t : c.layer_types) (t == LayerType::kFullAttention ? attn : gdn) += 1;
    const int64_t L = attn + gdn;
    auto calls = [&](const char* name) { return p.count(name) ? p.at(name).calls : 0; };
    EXPECT_EQ(calls("embed"), 1);
    EXPECT_EQ(calls("attention"), attn);
    EXPECT_EQ(calls("gated_delta_net"), gdn);
    EXPECT_EQ(calls("moe"), L);                     // router and shared-gate linears inside it not counted
    if (shared == 0) {
        EXPECT_EQ(calls("linear"), 4 * attn + 5 * gdn);  // q, k, v, o; qkv, z, b, a, out
        EXPECT_EQ(calls("linears"), 0);
    } else {
        EXPECT_EQ(calls("linears"), attn + gdn);  // q|k|v; qkv|z|b|a
        EXPECT_EQ(calls("linear"), attn + gdn);   // o; out
    }
    EXPECT_EQ(calls("lm_head"), 1);
    // Each residual add rides on the norm after it (Ops::add_rms_norm_zc): the post-attention
    // norms, every layer's input norm but the first, and the final norm.
    EXPECT_EQ(calls("rms_norm"), 1);
    EXPECT_EQ(calls("add_rms_norm"), 2 * L);
    EXPECT_EQ(calls("add"), 0);
    for (const auto& [name, t] : p) EXPECT_GT(t.ms, 0.0) << name;
    EXPECT_EQ(ops.graphs().captures(), 0);  // graphs are off while profiling
    EXPECT_TRUE(ops.take_op_profile().empty());
}

}  // namespace

TEST(CudaOpProfile, CountsEachTopLevelOpOnce) {
    QS_REQUIRE_GPU();
    auto weights = load_model_dir(gpu_test::source_path("models/qwen36-tiny"));
    ASSERT_TRUE(weights.is_ok()) << weights.status().message();
    for (int shared : {0, 1}) {
        SCOPED_TRACE("shared_linear_input " + std::to_string(shared));
        count_ops(*weights, shared);
    }
}

// The step timeline (backend/cuda/step_timeline.h) and the deferred argmax (Ops::argmax_rows_start
// / argmax_rows_wait) on the GPU: the deferred ids equal argmax_rows' (first index on ties, the
// contract of Ops::argmax_rows) and only the wait syncs; a replayed decode step of the trained tiny
// model is one graph launch, two eager ops (lm_head, argmax) and one sync, with a positive GPU
// time for each of its phases.
#include <gtest/gtest.h>

#include <cstring>

#include "gpu_test_util.h"
#include "model/qwen36.h"

using namespace qs;

TEST(CudaStepTimeline, DeferredArgmaxEqualsArgmaxRowsAndSyncsOnlyInTheWait) {
    QS_REQUIRE_GPU();
    cuda::CudaOps ops;
    std::mt19937 rng(3);
    const int64_t R = 5, n = 70001;
    std::vector<float> x = gpu_test::random_floats(size_t(R * n), rng);
    x[size_t(2 * n + 17)] = 50.0f;  // a tie: the first index wins
    x[size_t(2 * n + 900)] = 50.0f;
    const float* d = gpu_test::to_device(ops, x);
    std::vector<int32_t> ref(static_cast<size_t>(R)), got(static_cast<size_t>(R), -1);
    ops.argmax_rows(d, R, n, ref.data());
    EXPECT_EQ(ref[2], 17);
    ops.take_step_timeline();
    ops.argmax_rows_start(d, R, n);
    EXPECT_EQ(ops.take_step_timeline().counts.syncs, 0);
    ops.argmax_rows_wait(got.data());
    EXPECT_EQ(got, ref);
    EXPECT_EQ(ops.take_step_timeline().counts.syncs, 1);
    // A second start before the first was taken replaces it.
    ops.argmax_rows_start(d, 2, n);
    ops.argmax_rows_start(d + 2 * n, 3, n);
    std::vector<int32_t> last(3, -1);
    ops.argmax_rows_wait(last.data());
    EXPECT_EQ(last, std::vector<int32_t>(ref.begin() + 2, ref.end()));
}

TEST(CudaStepTimeline, ReplayedDecodeStepIsOneGraphLaunchAndOneSync) {
    QS_REQUIRE_GPU();
    auto weights = load_model_dir(gpu_test::source_path("models/qwen36-tiny"));
    ASSERT_TRUE(weights.is_ok()) << weights.status().message();
    const ModelConfig& c = weights->config;
    cuda::CudaOptions o;
    o.step_timeline = true;
    cuda::CudaOps ops(o);
    ops.prepare_weights(weight_set(*weights));
    Qwen36Model model(*weights, ops);
    const int64_t bs = 16;
    auto cache = ops.make_cache(CacheGeometry::for_model(c, 4, bs, 2, false, KvCacheDtype::kBF16));
    std::vector<int32_t> table = {0, 1};
    ForwardBatch b;
    SeqSpan span;
    span.row_begin = 0;
    span.num_tokens = 1;
    span.state_slot = 0;
    span.block_table = table;
    b.seqs.push_back(span);
    b.token_ids = {7};
    b.logits_rows = {0};
    b.argmax_only = true;
    model.forward(b, *cache);  // captures the graph
    ASSERT_EQ(ops.graphs().captures(), 1);
    ops.take_step_timeline();
    b.seqs[0].start_pos = 1;
    const Qwen36Model::Output out = model.forward(b, *cache);  // replays it
    ASSERT_EQ(out.argmax.size(), 1u);
    const cuda::StepTimeline::Totals t = ops.take_step_timeline();
    EXPECT_EQ(ops.graphs().replays(), 1);
    EXPECT_EQ(t.counts.graph_launches, 1);
    EXPECT_EQ(t.counts.eager_ops, 2);  // lm_head, argmax
    EXPECT_EQ(t.counts.syncs, 1);      // the argmax's ids
    for (const char* phase : {"forward", "lm_head", "argmax"}) {
        ASSERT_EQ(t.phase_calls.count(phase), 1u) << phase;
        EXPECT_EQ(t.phase_calls.at(phase), 1) << phase;
        EXPECT_GT(t.phase_ms.at(phase), 0.0) << phase;
    }
}

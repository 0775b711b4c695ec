// Engine::capture_graphs on the GPU (trained tiny model): after the start-up capture, serving a
// mix of prompts (prefill, then decode batches shrinking as requests finish; with MTP the verify,
// commit and draft steps) captures no further graph, and the tokens equal those of an engine
// whose graphs were captured lazily on first use (the same kernels either way).
#include <gtest/gtest.h>

#include <map>
#include <random>

#include "engine/engine.h"
#include "gpu_test_util.h"

using namespace qs;

namespace {

std::map<std::string, std::vector<int32_t>> serve(Engine& engine, const std::vector<GenerationRequest>& reqs) {
    std::map<std::string, std::vector<int32_t>> got;
    for (const auto& r : reqs)
        EXPECT_TRUE(engine
                        .submit(r, [&got, id = r.id](RequestOutput&& o) {
                            got[id].insert(got[id].end(), o.token_ids.begin(), o.token_ids.end());
                        })
                        .is_ok());
    engine.run_until_idle();
    return got;
}

}  // namespace

TEST(CudaGraphs, StartupCaptureLeavesNothingToCaptureWhileServing) {
    QS_REQUIRE_GPU();
    auto weights = load_model_dir(gpu_test::source_path("models/qwen36-tiny"));
    ASSERT_TRUE(weights.is_ok()) << weights.status().message();
    std::mt19937 rng(3);
    std::vector<GenerationRequest> reqs;
    for (int i = 0; i < 12; ++i) {
        GenerationRequest r;
        r.id = "r" + std::to_string(i);
        const int len = 1 + int(rng() % 90);
        for (int t = 0; t < len; ++t) r.prompt_ids.push_back(int32_t(rng() % uint32_t(weights->config.vocab_size)));
        r.params.temperature = 0.0;
        r.params.max_tokens = 4 + int(rng() % 20);  // different lengths: the decode batch shrinks
        r.params.ignore_eos = true;
        reqs.push_back(r);
    }
    for (int spec : {0, 2}) {
        EngineConfig cfg;
        cfg.num_speculative_tokens = spec;
        cfg.max_num_seqs = 16;
        cfg.max_num_batched_tokens = 256;
        cfg.cache_memory_mb = 64;
        cuda::CudaOptions o;
        o.graph_max_batch = 16;
        cuda::CudaOps eager_start(o), startup(o);
        eager_start.prepare_weights(weight_set(*weights));
        startup.prepare_weights(weight_set(*weights));
        auto lazy = Engine::create(*weights, eager_start, cfg, nullptr);
        auto warmed = Engine::create(*weights, startup, cfg, nullptr);
        ASSERT_TRUE(lazy.is_ok() && warmed.is_ok());
        const int64_t sizes = (*warmed)->capture_graphs();
        EXPECT_EQ(sizes, int64_t(startup.graph_batch_sizes().size()));
        const int64_t captured = startup.graph_captures();
        // Per size: the decode shape; with MTP also verify, commit, catch-up and draft shapes.
        EXPECT_GE(captured, sizes * (spec > 0 ? 4 : 1)) << "spec " << spec;
        const auto want = serve(**lazy, reqs);
        const auto got = serve(**warmed, reqs);
        EXPECT_GT(eager_start.graph_captures(), 0) << "spec " << spec;
        EXPECT_EQ(startup.graph_captures(), captured) << "spec " << spec << ": a step captured a graph while serving";
        for (const auto& r : reqs) EXPECT_EQ(got.at(r.id), want.at(r.id)) << "spec " << spec << " " << r.id;
        std::printf("[startup capture] mtp k=%d: %lld sizes, %lld graphs at start-up, none while serving (lazy engine: "
                    "%lld captures)\n",
                    spec, (long long)sizes, (long long)captured, (long long)eager_start.graph_captures());
        EXPECT_EQ((*warmed)->num_blocks_in_use(), 0);
    }
}

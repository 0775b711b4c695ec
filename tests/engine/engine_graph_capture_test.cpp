// Engine::capture_graphs on the CPU backend with a test subclass that claims graph batch sizes
// and records the replayable forwards (Replay::cache set) the engine runs: every claimed size up
// to max_num_seqs gets its decode shape (one row per sequence) and, with MTP, its verify shape
// (1 + k rows per sequence, deferred GDN state) and the commit after it (short spans); the
// progress reports count up to the total; afterwards the counters, pages, slots and prefix
// cache are as on a fresh engine, and requests give the same tokens as on an engine that never
// captured.
#include <gtest/gtest.h>

#include <set>
#include <tuple>

#include "engine_test_util.h"

using namespace qs;
using namespace qs::test;

namespace {

class GraphSizesOps final : public CpuOps {
public:
    explicit GraphSizesOps(std::vector<int64_t> sizes) : sizes_(std::move(sizes)) {}
    std::vector<int64_t> graph_batch_sizes() const override { return sizes_; }
    int64_t begin_forward(const ForwardBatch& batch, const int32_t* positions, const Replay& replay) override {
        if (replay.cache && !batch.seqs.empty()) {
            const int64_t n = int64_t(batch.seqs.size());
            bool deferred = false;
            for (const SeqSpan& s : batch.seqs) deferred = deferred || s.defer_state;
            shapes.insert({n, batch.num_tokens() / n, replay.short_spans, deferred});
        }
        return CpuOps::begin_forward(batch, positions, replay);
    }
    // {sequences, rows per sequence (stride), short spans (a commit), deferred state (a verify)}
    std::set<std::tuple<int64_t, int64_t, bool, bool>> shapes;

private:
    std::vector<int64_t> sizes_;
};

EngineConfig capture_config(int spec) {
    EngineConfig cfg;
    cfg.num_speculative_tokens = spec;
    cfg.max_num_seqs = 8;
    cfg.cache_memory_mb = 16;
    cfg.enable_prefix_caching = true;
    return cfg;
}

std::vector<GenerationRequest> some_requests(int vocab) {
    std::mt19937 rng(11);
    return {greedy_request("a", random_prompt(rng, 7, vocab), 9), greedy_request("b", random_prompt(rng, 23, vocab), 6),
            greedy_request("c", random_prompt(rng, 1, vocab), 12)};
}

void expect_clean(const Engine& engine) {
    const EngineStats st = engine.stats();
    EXPECT_EQ(engine.num_blocks_in_use(), 0);
    EXPECT_EQ(engine.num_slots_in_use(), 0);
    EXPECT_EQ(engine.num_live_requests(), 0);
    EXPECT_EQ(st.num_prompt_tokens_total, 0);
    EXPECT_EQ(st.num_completion_tokens_total, 0);
    EXPECT_EQ(st.steps_total, 0);
    EXPECT_EQ(st.prefix_cache_queries, 0);
    EXPECT_EQ(st.mtp_draft_tokens, 0);
    EXPECT_EQ(st.mtp_accepted_tokens, 0);
    EXPECT_EQ(st.mtp_drafts, 0);
    EXPECT_EQ(engine.profile().steps, 0);
}

}  // namespace

TEST(EngineGraphCapture, DecodeShapesForEverySizeUpToMaxNumSeqs) {
    const ModelWeights w = make_dummy_weights(engine_test_config(), 31);
    GraphSizesOps ops({1, 2, 3, 4, 8, 12});  // 12 > max_num_seqs (8): not captured
    auto created = Engine::create(w, ops, capture_config(0), nullptr);
    ASSERT_TRUE(created.is_ok()) << created.status().message();
    Engine& engine = **created;
    std::vector<GraphCaptureProgress> seen;
    EXPECT_EQ(engine.capture_graphs([&seen](const GraphCaptureProgress& p) { seen.push_back(p); }), 5);
    ASSERT_EQ(seen.size(), 5u);
    for (size_t i = 0; i < seen.size(); ++i) {
        EXPECT_EQ(seen[i].done, int64_t(i) + 1);
        EXPECT_EQ(seen[i].total, 5);
    }
    EXPECT_EQ(seen.front().batch_size, 8);  // largest first
    EXPECT_EQ(seen.back().batch_size, 1);
    for (int64_t s : {1, 2, 3, 4, 8}) EXPECT_TRUE(ops.shapes.count({s, 1, false, false})) << "decode shape of " << s;
    for (const auto& [n, stride, short_spans, deferred] : ops.shapes) EXPECT_LE(n, 8);
    expect_clean(engine);

    // max_num_seqs between two sizes: a full batch of 6 pads to 8, so 8 is captured with 6.
    GraphSizesOps ops6({1, 2, 3, 4, 8, 12});
    EngineConfig cfg6 = capture_config(0);
    cfg6.max_num_seqs = 6;
    auto six = Engine::create(w, ops6, cfg6, nullptr);
    ASSERT_TRUE(six.is_ok()) << six.status().message();
    std::vector<int64_t> sizes6;
    EXPECT_EQ((*six)->capture_graphs([&sizes6](const GraphCaptureProgress& p) { sizes6.push_back(p.batch_size); }), 5);
    EXPECT_EQ(sizes6, (std::vector<int64_t>{6, 4, 3, 2, 1}));
    EXPECT_TRUE(ops6.shapes.count({6, 1, false, false}));
    expect_clean(**six);

    const std::vector<GenerationRequest> reqs = some_requests(int(w.config.vocab_size));
    const auto expect = run_requests(w, 0, reqs);
    ASSERT_EQ(expect.size(), reqs.size());
    Collector col;
    for (const auto& r : reqs) ASSERT_TRUE(engine.submit(r, col.sink_for(r.id)).is_ok());
    engine.run_until_idle();
    for (const auto& r : reqs) EXPECT_EQ(col.got[r.id][0].tokens, expect.at(r.id).at(0).tokens) << r.id;
    EXPECT_EQ(engine.stats().num_prompt_tokens_total, 7 + 23 + 1);
}

TEST(EngineGraphCapture, MtpVerifyAndCommitShapesForEverySize) {
    const ModelWeights w = make_dummy_weights(engine_test_config(), 32);
    ASSERT_TRUE(w.mtp.present);
    GraphSizesOps ops({1, 2, 4, 8});
    auto created = Engine::create(w, ops, capture_config(2), nullptr);
    ASSERT_TRUE(created.is_ok()) << created.status().message();
    Engine& engine = **created;
    EXPECT_EQ(engine.capture_graphs(), 4);
    for (int64_t s : {1, 2, 4, 8}) {
        EXPECT_TRUE(ops.shapes.count({s, 1, false, false})) << "decode shape of " << s;
        EXPECT_TRUE(ops.shapes.count({s, 3, false, true})) << "verify shape of " << s;
        EXPECT_TRUE(ops.shapes.count({s, 3, true, false})) << "commit shape of " << s;
    }
    expect_clean(engine);
    EXPECT_EQ(engine.mtp_proposed_by_position(), std::vector<int64_t>(2, 0));

    const std::vector<GenerationRequest> reqs = some_requests(int(w.config.vocab_size));
    const auto expect = run_requests(w, 2, reqs);
    ASSERT_EQ(expect.size(), reqs.size());
    Collector col;
    for (const auto& r : reqs) ASSERT_TRUE(engine.submit(r, col.sink_for(r.id)).is_ok());
    engine.run_until_idle();
    for (const auto& r : reqs) EXPECT_EQ(col.got[r.id][0].tokens, expect.at(r.id).at(0).tokens) << r.id;
}

TEST(EngineGraphCapture, NothingWhereTheBackendHasNoGraphs) {
    const ModelWeights w = make_dummy_weights(engine_test_config(), 33);
    GraphSizesOps ops({});
    auto created = Engine::create(w, ops, capture_config(0), nullptr);
    ASSERT_TRUE(created.is_ok()) << created.status().message();
    int calls = 0;
    EXPECT_EQ((*created)->capture_graphs([&calls](const GraphCaptureProgress&) { ++calls; }), 0);
    EXPECT_EQ(calls, 0);
    EXPECT_TRUE(ops.shapes.empty());
}

// The engine's per-completion timing (RequestTiming on the final output) under a fake clock: step
// k starts at t = 10 k and its forward takes 1 (the step hook advances the clock), so every stage
// time is known from the schedule alone: a request waiting behind max_num_seqs queues until the
// step that admits it; the n completions of a request share its scheduling; an abort while
// waiting leaves it unscheduled; a preempted sequence keeps its first scheduling (vLLM's queue
// time ends there). engine_invariants_test.cpp checks the ordering on the real clock.
#include <gtest/gtest.h>

#include "engine_test_util.h"

using namespace qs;
using namespace qs::test;

namespace {

class RequestTimingTest : public ::testing::Test {
protected:
    static void SetUpTestSuite() { weights_ = new ModelWeights(make_dummy_weights(engine_test_config(), 91)); }
    static void TearDownTestSuite() { delete weights_; }

    // An engine on the fake clock (now_).
    std::unique_ptr<Engine> make_engine(EngineConfig cfg) {
        cfg.cache_memory_mb = 16;
        auto engine = Engine::create(*weights_, ops_, cfg, nullptr);
        EXPECT_TRUE(engine.is_ok()) << engine.status().message();
        if (!engine.is_ok()) return nullptr;
        std::unique_ptr<Engine> e = std::move(*engine);
        e->set_clock([this] { return now_; });
        e->set_step_hook([this](int64_t) { now_ += 1; });  // the forward takes 1
        return e;
    }

    // Steps at t = 10, 20, ... until no request is left; `before_step(k)` runs before step k.
    void run(Engine& e, const std::function<void(int)>& before_step = nullptr) {
        for (int k = 1; k < 200; ++k) {
            if (before_step) before_step(k);
            now_ = 10.0 * k;
            e.step();
            if (e.num_live_requests() == 0) return;
        }
        FAIL() << "requests still live after 200 steps";
    }

    static GenerationRequest request(const std::string& id, int num_prompt, int max_tokens) {
        std::vector<int32_t> prompt(static_cast<size_t>(num_prompt));
        for (int i = 0; i < num_prompt; ++i) prompt[size_t(i)] = 3 + i;
        GenerationRequest r = greedy_request(id, prompt, max_tokens);
        r.params.ignore_eos = true;  // exactly max_tokens tokens
        return r;
    }

    static void expect_timing(const RequestTiming& t, double arrival, double scheduled, double first, double last) {
        EXPECT_EQ(t.arrival_s, arrival);
        EXPECT_EQ(t.first_scheduled_s, scheduled);
        EXPECT_EQ(t.first_token_s, first);
        EXPECT_EQ(t.last_token_s, last);
    }

    static ModelWeights* weights_;
    CpuOps ops_;
    double now_ = 0;
};
ModelWeights* RequestTimingTest::weights_ = nullptr;

TEST_F(RequestTimingTest, WaitingBehindMaxNumSeqsIsQueueTime) {
    EngineConfig cfg;
    cfg.max_num_seqs = 1;
    auto e = make_engine(cfg);
    ASSERT_TRUE(e);
    Collector col;
    for (const char* id : {"a", "b"}) ASSERT_TRUE(e->submit(request(id, 4, 3), col.sink_for(id)).is_ok());
    run(*e);
    // a: prefill and first token in step 1 (t 10 → 11), decodes in steps 2 and 3. b waits for the
    // slot until step 4.
    const RequestTiming& a = col.got["a"][0].timing;
    const RequestTiming& b = col.got["b"][0].timing;
    expect_timing(a, 0, 10, 11, 31);
    expect_timing(b, 0, 40, 41, 61);
    EXPECT_EQ(a.queue_s(), 10);
    EXPECT_EQ(b.queue_s(), 40);
    // Steps 1 and 4 carry the prompts (4 rows each), steps 2, 3, 5 and 6 one decode row each; every
    // step takes 1 on this clock.
    const EngineStats st = e->stats();
    EXPECT_EQ(st.steps_prefill, 2);
    EXPECT_EQ(st.steps_decode, 4);
    EXPECT_EQ(st.step_seconds_prefill, 2.0);
    EXPECT_EQ(st.step_seconds_decode, 4.0);
    EXPECT_EQ(st.prompt_rows_total, 8);
    EXPECT_EQ(st.decode_rows_total, 4);
    EXPECT_EQ(b.prefill_s(), 1);
    EXPECT_EQ(b.decode_s(), 20);
    EXPECT_EQ(b.inference_s(), 21);
    EXPECT_EQ(b.prefill_s() + b.decode_s(), b.inference_s());
}

TEST_F(RequestTimingTest, ChunkedPrefillCountsFromTheFirstChunk) {
    EngineConfig cfg;
    cfg.max_num_seqs = 4;
    cfg.max_num_batched_tokens = 8;  // a 20-token prompt takes steps 1..3
    auto e = make_engine(cfg);
    ASSERT_TRUE(e);
    Collector col;
    ASSERT_TRUE(e->submit(request("a", 20, 2), col.sink_for("a")).is_ok());
    run(*e);
    const RequestTiming& a = col.got["a"][0].timing;
    EXPECT_EQ(a.first_scheduled_s, 10);
    EXPECT_GT(a.first_token_s, 21);  // not before the last chunk's step
    EXPECT_EQ(a.prefill_s() + a.decode_s(), a.inference_s());
    EXPECT_EQ(a.decode_s(), 10);  // the second token, one step later
}

TEST_F(RequestTimingTest, CompletionsShareTheRequestsScheduling) {
    EngineConfig cfg;
    cfg.max_num_seqs = 4;
    auto e = make_engine(cfg);
    ASSERT_TRUE(e);
    Collector col;
    GenerationRequest r = request("a", 4, 3);
    r.params.n = 3;
    r.params.temperature = 1.0;
    r.params.seed = 7;
    ASSERT_TRUE(e->submit(r, col.sink_for("a")).is_ok());
    run(*e);
    ASSERT_EQ(col.got["a"].size(), 3u);
    for (int i = 0; i < 3; ++i) {
        SCOPED_TRACE(i);
        expect_timing(col.got["a"][i].timing, 0, 10, 11, 31);
    }
}

TEST_F(RequestTimingTest, AbortedWhileWaitingWasNeverScheduled) {
    EngineConfig cfg;
    cfg.max_num_seqs = 1;
    auto e = make_engine(cfg);
    ASSERT_TRUE(e);
    Collector col;
    now_ = 5;
    for (const char* id : {"a", "b"}) ASSERT_TRUE(e->submit(request(id, 4, 3), col.sink_for(id)).is_ok());
    run(*e, [&](int k) {
        if (k == 2) e->abort("b");
    });
    const Completion& b = col.got["b"][0];
    EXPECT_EQ(b.finish, FinishReason::kAbort);
    EXPECT_EQ(b.timing.arrival_s, 5);
    EXPECT_FALSE(b.timing.scheduled());
    EXPECT_FALSE(b.timing.has_tokens());
    expect_timing(col.got["a"][0].timing, 5, 10, 11, 31);
}

TEST_F(RequestTimingTest, AbortedWhileRunningKeepsItsLastTokenTime) {
    EngineConfig cfg;
    cfg.max_num_seqs = 1;
    auto e = make_engine(cfg);
    ASSERT_TRUE(e);
    Collector col;
    ASSERT_TRUE(e->submit(request("a", 4, 50), col.sink_for("a")).is_ok());
    run(*e, [&](int k) {
        if (k == 3) e->abort("a");  // taken at step 3, after tokens at steps 1 and 2
    });
    const Completion& a = col.got["a"][0];
    EXPECT_EQ(a.finish, FinishReason::kAbort);
    expect_timing(a.timing, 0, 10, 11, 21);
}

TEST_F(RequestTimingTest, PreemptionKeepsTheFirstScheduling) {
    // 4 pages of 4 tokens: a and b (4 + 10 tokens each) start together in step 1, then b (the
    // later) is preempted when a needs its fifth page, and recomputed after a finishes.
    EngineConfig cfg;
    cfg.max_num_seqs = 2;
    cfg.kv_block_size = 4;
    cfg.num_kv_blocks = 4;
    cfg.max_model_len = 16;
    cfg.enable_prefix_caching = false;
    cfg.num_state_snapshots = 8;
    auto e = make_engine(cfg);
    ASSERT_TRUE(e);
    Collector col;
    for (const char* id : {"a", "b"}) ASSERT_TRUE(e->submit(request(id, 4, 10), col.sink_for(id)).is_ok());
    run(*e);
    EXPECT_GT(e->stats().num_preemptions_total, 0);
    const RequestTiming& a = col.got["a"][0].timing;
    const RequestTiming& b = col.got["b"][0].timing;
    expect_timing(a, 0, 10, 11, 101);  // ten tokens, one a step
    EXPECT_EQ(b.first_scheduled_s, 10);
    EXPECT_EQ(b.queue_s(), 10);        // the wait after its preemption is not queue time
    EXPECT_EQ(b.first_token_s, 11);
    EXPECT_GT(b.last_token_s, 111);    // it resumed only after a finished
    EXPECT_EQ(b.decode_s(), b.last_token_s - 11);
    EXPECT_EQ(col.got["b"][0].tokens.size(), 10u);
}

}  // namespace

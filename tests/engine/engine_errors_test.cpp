// Bad input at the engine boundary: prompts too long, impossible sampling values, ids outside
// the vocabulary, duplicate ids, a full waiting queue; aborting unknown or finished requests is
// harmless.
#include <gtest/gtest.h>

#include "engine_test_util.h"

using namespace qs;
using namespace qs::test;

namespace {
void expect_error(EngineApi& e, GenerationRequest r, ErrorKind kind, const std::string& needle) {
    Collector col;
    Status st = e.submit(std::move(r), col.sink_for("x"));
    ASSERT_FALSE(st.is_ok());
    EXPECT_EQ(st.kind(), kind);
    EXPECT_NE(st.message().find(needle), std::string::npos) << st.message();
}
}  // namespace

TEST(EngineErrors, RejectsBadRequestsWithTheParameterNamed) {
    ModelWeights w = make_dummy_weights(engine_test_config(), 90);
    CpuOps ops;
    EngineConfig cfg;
    cfg.max_model_len = 64;
    cfg.max_num_seqs = 4;
    cfg.max_waiting = 2;
    cfg.cache_memory_mb = 16;
    auto engine = Engine::create(w, ops, cfg, nullptr);
    ASSERT_TRUE(engine.is_ok()) << engine.status().message();
    Engine& e = **engine;
    EXPECT_EQ(e.max_model_len(), 64);

    expect_error(e, greedy_request("a", std::vector<int32_t>(64, 1), 4), ErrorKind::kInvalidArgument,
                 "prompt has 64 tokens but max_model_len is 64");
    auto r = greedy_request("b", {1, 2}, 4);
    r.params.top_p = 0.0;
    expect_error(e, r, ErrorKind::kInvalidArgument, "top_p");
    r = greedy_request("c", {1, 2}, 0);
    expect_error(e, r, ErrorKind::kInvalidArgument, "max_tokens");
    r = greedy_request("d", {1, 600}, 4);
    expect_error(e, r, ErrorKind::kInvalidArgument, "prompt token 600 at index 1 is outside the vocabulary");
    r = greedy_request("d2", {1, 2}, 4);
    r.params.logit_bias = {{3, 1.0f}, {600, -1.0f}};
    expect_error(e, r, ErrorKind::kInvalidArgument, "logit_bias token 600 is outside the vocabulary");
    r = greedy_request("d3", {1, 2}, 4);
    r.params.min_tokens = 5;
    expect_error(e, r, ErrorKind::kInvalidArgument, "min_tokens");
    r = greedy_request("e", {}, 4);
    expect_error(e, r, ErrorKind::kInvalidArgument, "prompt is empty");
    r = greedy_request("f", {1}, 4);
    r.params.stop = {"x"};
    expect_error(e, r, ErrorKind::kInvalidArgument, "stop strings need a tokenizer");

    // Queue bound: two waiting requests fill it; the third is told to retry later.
    Collector col;
    ASSERT_TRUE(e.submit(greedy_request("q1", {1, 2}, 3), col.sink_for("q1")).is_ok());
    expect_error(e, greedy_request("q1", {1, 2}, 3), ErrorKind::kInvalidArgument, "duplicate request id 'q1'");
    ASSERT_TRUE(e.submit(greedy_request("q2", {1, 2}, 3), col.sink_for("q2")).is_ok());
    expect_error(e, greedy_request("q3", {1, 2}, 3), ErrorKind::kResourceExhausted, "waiting queue is full");

    e.abort("no-such-request");
    e.run_until_idle();
    e.abort("q1");  // finished: harmless
    e.run_until_idle();
    EXPECT_EQ(col.got["q1"][0].num_final, 1);
    EXPECT_EQ(col.got["q1"][0].finish, FinishReason::kLength);
    EXPECT_EQ(col.got["q2"][0].tokens.size(), 3u);
    // Room again once they are done.
    EXPECT_TRUE(e.submit(greedy_request("q3", {1, 2}, 3), col.sink_for("q3")).is_ok());
    e.run_until_idle();
    EXPECT_EQ(e.num_live_requests(), 0);
}

TEST(EngineErrors, ImpossibleConfigurationsAreNamed) {
    ModelWeights w = make_dummy_weights(engine_test_config(), 91);
    CpuOps ops;
    EngineConfig cfg;
    cfg.num_speculative_tokens = 4;
    auto e1 = Engine::create(w, ops, cfg, nullptr);
    ASSERT_FALSE(e1.is_ok());
    EXPECT_NE(e1.status().message().find("num_speculative_tokens must be in [0, 3]"), std::string::npos);
    cfg = EngineConfig();
    cfg.cache_memory_mb = 1;
    cfg.max_num_seqs = 4096;
    auto e2 = Engine::create(w, ops, cfg, nullptr);
    ASSERT_FALSE(e2.is_ok());
    EXPECT_EQ(e2.status().kind(), ErrorKind::kResourceExhausted);
    EXPECT_NE(e2.status().message().find("lower max_num_seqs"), std::string::npos) << e2.status().message();
    ModelWeights no_mtp = make_dummy_weights(engine_test_config(), 92, /*with_mtp=*/false);
    cfg = EngineConfig();
    cfg.num_speculative_tokens = 1;
    cfg.cache_memory_mb = 16;
    auto e3 = Engine::create(no_mtp, ops, cfg, nullptr);
    ASSERT_FALSE(e3.is_ok());
    EXPECT_NE(e3.status().message().find("MTP block"), std::string::npos);
    // A draft vocabulary larger than the model's, or below zero.
    cfg = EngineConfig();
    cfg.num_speculative_tokens = 1;
    cfg.cache_memory_mb = 16;
    cfg.speculative_draft_vocab = w.config.vocab_size + 1;
    auto e4 = Engine::create(w, ops, cfg, nullptr);
    ASSERT_FALSE(e4.is_ok());
    EXPECT_NE(e4.status().message().find("speculative_draft_vocab (" + std::to_string(w.config.vocab_size + 1) +
                                         ") exceeds the model's vocab_size (" + std::to_string(w.config.vocab_size) +
                                         ")"),
              std::string::npos)
        << e4.status().message();
    cfg.speculative_draft_vocab = -1;
    auto e5 = Engine::create(w, ops, cfg, nullptr);
    ASSERT_FALSE(e5.is_ok());
    EXPECT_NE(e5.status().message().find("speculative_draft_vocab"), std::string::npos) << e5.status().message();
    cfg.speculative_draft_vocab = w.config.vocab_size;  // the whole vocabulary: accepted
    EXPECT_TRUE(Engine::create(w, ops, cfg, nullptr).is_ok());
}

// Sampling through the engine on the CPU backend: logit_bias and min_tokens reach the draws,
// sampled requests with penalties and logprobs give the same tokens with MTP on as off (the
// noise is keyed by completion position), and the siblings of n > 1 draw their first token from
// the parent's row once adjusted.
#include <gtest/gtest.h>

#include "engine_test_util.h"

using namespace qs;
using namespace qs::test;


TEST(EngineSampling, LogitBiasForcesAToken) {
    ModelWeights w = make_dummy_weights(engine_test_config(), 90);
    std::mt19937 rng(3);
    const int V = int(w.config.vocab_size);
    GenerationRequest r = greedy_request("b", random_prompt(rng, 9, V), 6);
    r.params.ignore_eos = true;
    r.params.logit_bias = {{17, 100.0f}};
    const auto got = run_requests(w, 0, {r});
    EXPECT_EQ(got.at("b").at(0).tokens, std::vector<int32_t>(6, 17));
    // Sampling too: +100 leaves no other token any mass.
    r.params.temperature = 1.0;
    r.params.seed = 4;
    EXPECT_EQ(run_requests(w, 0, {r}).at("b").at(0).tokens, std::vector<int32_t>(6, 17));
}

TEST(EngineSampling, MinTokensBansStopTokensUntilReached) {
    ModelWeights w = make_dummy_weights(engine_test_config(), 91);
    std::mt19937 rng(5);
    const int V = int(w.config.vocab_size);
    GenerationRequest r = greedy_request("m", random_prompt(rng, 11, V), 12);
    r.params.ignore_eos = true;
    // Greedy continuation first, to make its first token a stop token.
    const std::vector<int32_t> free_run = run_requests(w, 0, {r}).at("m").at(0).tokens;
    ASSERT_EQ(free_run.size(), 12u);
    r.params.stop_token_ids = {free_run[0]};
    EXPECT_EQ(run_requests(w, 0, {r}).at("m").at(0).tokens, std::vector<int32_t>{free_run[0]});
    r.params.min_tokens = 4;
    const Completion c = run_requests(w, 0, {r}).at("m").at(0);
    ASSERT_GE(c.tokens.size(), 4u);
    for (size_t i = 0; i < 4; ++i) EXPECT_NE(c.tokens[i], free_run[0]) << "position " << i;
    // Past min_tokens the stop token ends the completion again if drawn.
    if (c.tokens.size() < 12) {
        EXPECT_EQ(c.tokens.back(), free_run[0]);
        EXPECT_EQ(c.finish, FinishReason::kStop);
    }
}

TEST(EngineSampling, SampledWithPenaltiesAndLogprobsIsTheSameWithMtp) {
    ModelWeights w = make_dummy_weights(engine_test_config(), 92);
    std::mt19937 rng(7);
    const int V = int(w.config.vocab_size);
    std::vector<GenerationRequest> reqs;
    for (int i = 0; i < 6; ++i) {
        GenerationRequest r = greedy_request("s" + std::to_string(i), random_prompt(rng, 4 + int(rng() % 20), V), 20);
        r.params.temperature = 0.6 + 0.2 * i;
        r.params.top_p = i % 2 ? 0.9 : 1.0;
        r.params.top_k = i == 3 ? 40 : 0;
        r.params.min_p = i == 4 ? 0.05 : 0.0;
        r.params.repetition_penalty = i % 3 == 0 ? 1.2 : 1.0;
        r.params.frequency_penalty = i % 3 == 1 ? 0.5 : 0.0;
        r.params.presence_penalty = i % 3 == 2 ? 0.3 : 0.0;
        r.params.logit_bias = {{int32_t(rng() % uint32_t(V)), 3.0f}};
        r.params.logprobs = 3;
        r.params.seed = uint64_t(100 + i);
        r.params.ignore_eos = true;
        reqs.push_back(r);
    }
    const auto off = run_requests(w, 0, reqs);
    for (int spec : {1, 3}) {
        const auto on = run_requests(w, spec, reqs);
        for (const auto& r : reqs) {
            const Completion& a = off.at(r.id).at(0);
            const Completion& b = on.at(r.id).at(0);
            ASSERT_EQ(a.tokens.size(), 20u);
            EXPECT_EQ(a.tokens, b.tokens) << r.id << ", k=" << spec;
            ASSERT_EQ(a.logprobs.size(), b.logprobs.size());
            for (size_t i = 0; i < a.logprobs.size(); ++i) EXPECT_NEAR(a.logprobs[i], b.logprobs[i], 1e-4) << r.id;
        }
    }
}

TEST(EngineSampling, ForkedSiblingsWithPenaltiesAreReproducible) {
    ModelWeights w = make_dummy_weights(engine_test_config(), 93);
    std::mt19937 rng(9);
    const int V = int(w.config.vocab_size);
    GenerationRequest r = greedy_request("n", random_prompt(rng, 13, V), 8);
    r.params.temperature = 1.0;
    r.params.repetition_penalty = 1.5;
    r.params.logit_bias = {{5, 1.0f}};
    r.params.seed = 77;
    r.params.n = 4;
    r.params.logprobs = 1;
    r.params.ignore_eos = true;
    const auto a = run_requests(w, 0, {r});
    // With other requests in the batch and MTP on: the same four completions.
    std::vector<GenerationRequest> crowd = {r};
    for (int i = 0; i < 5; ++i) crowd.push_back(greedy_request("o" + std::to_string(i), random_prompt(rng, 7, V), 5));
    const auto b = run_requests(w, 2, crowd);
    ASSERT_EQ(a.at("n").size(), 4u);
    for (int i = 0; i < 4; ++i) {
        EXPECT_EQ(a.at("n").at(i).tokens, b.at("n").at(i).tokens) << "completion " << i;
        ASSERT_EQ(a.at("n").at(i).logprobs.size(), 8u);
        for (size_t j = 0; j < 8; ++j) EXPECT_NEAR(a.at("n").at(i).logprobs[j], b.at("n").at(i).logprobs[j], 1e-4);
    }
}

TEST(EngineSampling, BenchmarkMtpAcceptanceForcesTheVerdicts) {
    // Benchmark only: P = 1 accepts every draft, P = 0 none, P = 0.5 about half (the hash of
    // (key, position) decides), whatever the target would say.
    ModelWeights w = make_dummy_weights(engine_test_config(), 94);
    std::mt19937 rng(13);
    const int V = int(w.config.vocab_size);
    for (double p : {0.0, 0.5, 1.0}) {
        CpuOps ops;
        EngineConfig cfg;
        cfg.num_speculative_tokens = 2;
        cfg.max_num_seqs = 8;
        cfg.cache_memory_mb = 16;
        cfg.benchmark_mtp_acceptance = p;
        auto engine = Engine::create(w, ops, cfg, nullptr);
        ASSERT_TRUE(engine.is_ok()) << engine.status().message();
        Collector col;
        for (int i = 0; i < 6; ++i) {
            GenerationRequest r = greedy_request("f" + std::to_string(i), random_prompt(rng, 9, V), 40);
            r.params.ignore_eos = true;
            ASSERT_TRUE((*engine)->submit(r, col.sink_for(r.id)).is_ok());
        }
        (*engine)->run_until_idle();
        const auto& prop = (*engine)->mtp_proposed_by_position();
        const auto& acc = (*engine)->mtp_accepted_by_position();
        ASSERT_GT(prop[0], 0);
        const double rate = double(acc[0]) / double(prop[0]);
        if (p == 0.0) {
            EXPECT_EQ(acc[0], 0);
        }
        if (p == 1.0) {
            EXPECT_EQ(acc[0], prop[0]);
        }
        if (p == 0.5) {
            EXPECT_GT(rate, 0.3);
            EXPECT_LT(rate, 0.7);
        }
        for (int i = 0; i < 6; ++i) EXPECT_EQ(col.got["f" + std::to_string(i)][0].tokens.size(), 40u);
        EXPECT_EQ((*engine)->num_blocks_in_use(), 0);
    }
    EngineConfig bad;
    bad.benchmark_mtp_acceptance = 1.5;
    EXPECT_FALSE(bad.validate().is_ok());
}

TEST(EngineSampling, MinTokensHoldsBackStopStrings) {
    // FakeDecoder: token t is the text "<letter><digit>"; a stop string equal to the first
    // token's text ends the completion at once, unless min_tokens says otherwise.
    ModelWeights w = make_dummy_weights(engine_test_config(), 95);
    std::mt19937 rng(17);
    const int V = int(w.config.vocab_size);
    GenerationRequest r = greedy_request("s", random_prompt(rng, 10, V), 8);
    r.params.ignore_eos = true;
    auto run = [&](const GenerationRequest& req) {
        CpuOps ops;
        EngineConfig cfg;
        cfg.max_num_seqs = 4;
        cfg.cache_memory_mb = 16;
        auto engine = Engine::create(w, ops, cfg, std::make_shared<FakeDecoder>());
        EXPECT_TRUE(engine.is_ok());
        Collector col;
        EXPECT_TRUE((*engine)->submit(req, col.sink_for(req.id)).is_ok());
        (*engine)->run_until_idle();
        return col.got["s"][0];
    };
    const Completion free_run = run(r);
    ASSERT_EQ(free_run.tokens.size(), 8u);
    const std::string first = FakeDecoder::text_of(free_run.tokens[0]);
    r.params.stop = {first};
    EXPECT_EQ(run(r).text, "");
    EXPECT_EQ(run(r).finish, FinishReason::kStop);
    r.params.min_tokens = 3;
    const Completion held = run(r);
    EXPECT_GE(held.tokens.size(), 3u);
    EXPECT_EQ(held.text.substr(0, first.size()), first);  // not cut at the first token
}

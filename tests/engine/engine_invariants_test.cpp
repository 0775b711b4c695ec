// The engine's invariants on the CPU backend with a tiny model:
// (a) a request's greedy output equals the same prompt decoded alone, whatever it is batched
//     with, for any prefill chunk size, with prefix caching on or off (hits and misses), under
//     preemption forced by a tiny KV pool, and with MTP k = 0..3 (spare-slot mode too);
// (b) no request is lost or answered twice under seeded storms of submits and aborts;
// (c) every page and slot is returned when all requests end;
// (d) seeded sampling is reproducible regardless of batching;
// (e) stop strings that span tokens stop at the right character.
#include <gtest/gtest.h>

#include "engine_test_util.h"

using namespace qs;
using namespace qs::test;

namespace {

struct Scenario {
    std::string name;
    int64_t max_num_batched_tokens;
    bool prefix_caching;
    int64_t num_kv_blocks;  // 0: plenty
    int64_t spec;
    int64_t max_num_seqs;
    int64_t mtp_spare_slots = 0;  // --mtp-spare-slots
};
// gtest prints a parameter in failure messages and test listings; without this, a byte dump.
void PrintTo(const Scenario& s, std::ostream* os) { *os << s.name; }

class GreedyInvariance : public ::testing::TestWithParam<Scenario> {
protected:
    static void SetUpTestSuite() {
        weights_ = new ModelWeights(make_dummy_weights(engine_test_config(), 77));
    }
    static void TearDownTestSuite() { delete weights_; }
    static ModelWeights* weights_;
};
ModelWeights* GreedyInvariance::weights_ = nullptr;

}  // namespace

TEST_P(GreedyInvariance, MatchesSingleSequenceReference) {
    const Scenario& sc = GetParam();
    const ModelWeights& w = *weights_;
    CpuOps ref_ops;
    Qwen36Model ref_model(w, ref_ops);

    // 24 requests: varied lengths, some sharing long prefixes (prefix-cache hits), 1..40 tokens out.
    std::mt19937 rng(2024);
    const int V = int(w.config.vocab_size);
    std::vector<int32_t> shared = random_prompt(rng, 37, V);
    std::vector<GenerationRequest> reqs;
    for (int i = 0; i < 24; ++i) {
        std::vector<int32_t> prompt;
        if (i % 3 == 0) {
            prompt = shared;
            auto tail = random_prompt(rng, 1 + i % 7, V);
            prompt.insert(prompt.end(), tail.begin(), tail.end());
        } else {
            prompt = random_prompt(rng, 1 + int(rng() % 50), V);
        }
        reqs.push_back(greedy_request("r" + std::to_string(i), prompt, 1 + int(rng() % 24)));
    }

    EngineConfig cfg;
    cfg.max_num_batched_tokens = sc.max_num_batched_tokens;
    cfg.enable_prefix_caching = sc.prefix_caching;
    cfg.num_kv_blocks = sc.num_kv_blocks;
    cfg.kv_block_size = 4;
    cfg.num_speculative_tokens = sc.spec;
    cfg.max_num_seqs = sc.max_num_seqs;
    cfg.mtp_spare_slots = sc.mtp_spare_slots;
    cfg.num_state_snapshots = 8;
    cfg.cache_memory_mb = 16;
    if (sc.num_kv_blocks) cfg.max_model_len = sc.num_kv_blocks * cfg.kv_block_size;
    CpuOps ops;
    auto engine = Engine::create(w, ops, cfg, std::make_shared<FakeDecoder>());
    ASSERT_TRUE(engine.is_ok()) << engine.status().message();
    Collector col;
    // Two waves, so the second finds the first's prefixes cached.
    for (size_t i = 0; i < reqs.size(); ++i) {
        ASSERT_TRUE((*engine)->submit(reqs[i], col.sink_for(reqs[i].id)).is_ok());
        if (i == reqs.size() / 2) (*engine)->run_until_idle();
    }
    (*engine)->run_until_idle();

    for (const auto& r : reqs) {
        const auto expect = greedy_reference(ref_model, r.prompt_ids, int(r.params.max_tokens), cfg.kv_cache_dtype);
        const Completion& c = col.got[r.id][0];
        EXPECT_EQ(c.tokens, expect) << sc.name << " request " << r.id;
        EXPECT_EQ(c.num_final, 1);
        EXPECT_EQ(c.num_after_final, 0);
        EXPECT_EQ(c.finish, FinishReason::kLength);
        // Its timing (request_timing_test.cpp checks the values): stages in order, prefill +
        // decode = inference, whatever the batching, preemption or MTP.
        const RequestTiming& t = c.timing;
        ASSERT_TRUE(t.has_tokens()) << sc.name << " request " << r.id;
        EXPECT_LE(t.arrival_s, t.first_scheduled_s);
        EXPECT_LE(t.first_scheduled_s, t.first_token_s);
        EXPECT_LE(t.first_token_s, t.last_token_s);
        EXPECT_NEAR(t.prefill_s() + t.decode_s(), t.inference_s(), 1e-9);
    }
    // (c) everything given back.
    EXPECT_EQ((*engine)->num_blocks_in_use(), 0);
    EXPECT_EQ((*engine)->num_slots_in_use(), 0);
    EXPECT_EQ((*engine)->num_live_requests(), 0);
    const EngineStats st = (*engine)->stats();
    if (sc.prefix_caching) {
        EXPECT_GT(st.prefix_cache_hits, 0) << sc.name;
    } else {
        EXPECT_EQ(st.prefix_cache_hits, 0);
    }
    if (sc.num_kv_blocks) {
        EXPECT_GT(st.num_preemptions_total, 0) << sc.name;
    }
    if (sc.spec) {
        EXPECT_GT(st.mtp_draft_tokens, 0) << sc.name;
    }
}

INSTANTIATE_TEST_SUITE_P(
    Scenarios, GreedyInvariance,
    ::testing::Values(Scenario{"big_budget", 4096, false, 0, 0, 64}, Scenario{"chunk7", 7, false, 0, 0, 64},
                      Scenario{"chunk16_prefix", 16, true, 0, 0, 64}, Scenario{"prefix", 2048, true, 0, 0, 64},
                      Scenario{"preempt", 64, false, 24, 0, 8}, Scenario{"preempt_prefix", 64, true, 24, 0, 8},
                      Scenario{"mtp1", 2048, false, 0, 1, 64}, Scenario{"mtp2_prefix", 33, true, 0, 2, 64},
                      Scenario{"mtp3_preempt", 64, true, 28, 3, 8}, Scenario{"one_seq", 9, true, 0, 2, 1},
                      Scenario{"mtp1_spare", 2048, false, 0, 1, 64, 64},
                      Scenario{"mtp3_preempt_spare3", 64, true, 28, 3, 8, 3}),
    [](const ::testing::TestParamInfo<Scenario>& info) { return info.param.name; });

TEST(EngineInvariants, BatchedWithUpTo64Others) {
    ModelWeights w = make_dummy_weights(engine_test_config(), 78);
    CpuOps ref_ops;
    Qwen36Model ref_model(w, ref_ops);
    std::mt19937 rng(5);
    const int V = int(w.config.vocab_size);
    const auto target = greedy_request("target", random_prompt(rng, 21, V), 12);
    const auto expect = greedy_reference(ref_model, target.prompt_ids, 12, KvCacheDtype::kBF16);
    for (int others : {1, 7, 64}) {
        CpuOps ops;
        EngineConfig cfg;
        cfg.max_num_seqs = 80;
        cfg.cache_memory_mb = 16;
        auto engine = Engine::create(w, ops, cfg, nullptr);
        ASSERT_TRUE(engine.is_ok());
        Collector col;
        for (int i = 0; i < others / 2; ++i) {
            auto r = greedy_request("o" + std::to_string(i), random_prompt(rng, 1 + int(rng() % 30), V), 1 + int(rng() % 16));
            ASSERT_TRUE((*engine)->submit(r, col.sink_for(r.id)).is_ok());
        }
        ASSERT_TRUE((*engine)->submit(target, col.sink_for("target")).is_ok());
        for (int i = others / 2; i < others; ++i) {
            auto r = greedy_request("o" + std::to_string(i), random_prompt(rng, 1 + int(rng() % 30), V), 1 + int(rng() % 16));
            ASSERT_TRUE((*engine)->submit(r, col.sink_for(r.id)).is_ok());
        }
        (*engine)->run_until_idle();
        EXPECT_EQ(col.got["target"][0].tokens, expect) << others << " others";
        EXPECT_EQ(int(col.got.size()), others + 1);
    }
}

TEST(EngineInvariants, StormsOfSubmitsAndAborts) {
    ModelWeights w = make_dummy_weights(engine_test_config(), 79);
    for (uint32_t seed : {1u, 2u, 3u}) {
        std::mt19937 rng(seed);
        const int V = int(w.config.vocab_size);
        CpuOps ops;
        EngineConfig cfg;
        cfg.max_num_seqs = 6;
        cfg.kv_block_size = 4;
        cfg.num_kv_blocks = 40;
        cfg.max_model_len = 160;
        cfg.max_num_batched_tokens = 24;
        cfg.num_speculative_tokens = seed % 3;
        cfg.max_waiting = 1000;
        auto engine = Engine::create(w, ops, cfg, std::make_shared<FakeDecoder>());
        ASSERT_TRUE(engine.is_ok()) << engine.status().message();
        Collector col;
        std::vector<std::string> ids;
        std::map<std::string, int> n_of;
        for (int step = 0; step < 150; ++step) {
            const uint32_t action = rng() % 10;
            if (action < 4) {
                auto r = greedy_request("s" + std::to_string(ids.size()), random_prompt(rng, 1 + int(rng() % 40), V),
                                        1 + int(rng() % 20));
                r.params.n = 1 + int(rng() % 3);
                r.params.temperature = (rng() % 2) ? 0.0 : 0.8;
                r.params.seed = rng();
                ASSERT_TRUE((*engine)->submit(r, col.sink_for(r.id)).is_ok());
                ids.push_back(r.id);
                n_of[r.id] = int(r.params.n);
            } else if (action < 6 && !ids.empty()) {
                (*engine)->abort(ids[rng() % ids.size()]);  // running, waiting or already finished
            } else if (action == 6) {
                (*engine)->abort("never-submitted");
            }
            (*engine)->step();
        }
        (*engine)->run_until_idle();
        for (const auto& id : ids) {
            ASSERT_EQ(int(col.got[id].size()) <= n_of[id], true) << id;
            for (int i = 0; i < n_of[id]; ++i) {
                // An abort before the fork ends the request: its unforked completions never start.
                if (!col.got[id].count(i)) {
                    EXPECT_EQ(col.got[id][0].finish, FinishReason::kAbort) << id;
                    continue;
                }
                const Completion& c = col.got[id][i];
                EXPECT_EQ(c.num_final, 1) << id << "#" << i;
                EXPECT_EQ(c.num_after_final, 0) << id << "#" << i;
            }
        }
        EXPECT_EQ((*engine)->num_blocks_in_use(), 0);
        EXPECT_EQ((*engine)->num_slots_in_use(), 0);
        EXPECT_EQ((*engine)->num_live_requests(), 0);
    }
}

TEST(EngineInvariants, SeededSamplingIsReproducibleAcrossBatching) {
    ModelWeights w = make_dummy_weights(engine_test_config(), 80);
    std::mt19937 rng(9);
    const int V = int(w.config.vocab_size);
    GenerationRequest r = greedy_request("x", random_prompt(rng, 17, V), 20);
    r.params.temperature = 0.9;
    r.params.top_p = 0.9;
    r.params.top_k = 50;
    r.params.seed = 1234;
    r.params.n = 3;
    std::vector<std::map<int, Completion>> runs;
    for (int others : {0, 9}) {
        for (int spec : {0, 2}) {
            CpuOps ops;
            EngineConfig cfg;
            cfg.num_speculative_tokens = spec;
            cfg.max_num_batched_tokens = 11;
            cfg.max_num_seqs = 16;
            cfg.cache_memory_mb = 16;
            auto engine = Engine::create(w, ops, cfg, nullptr);
            ASSERT_TRUE(engine.is_ok()) << engine.status().message();
            Collector col;
            for (int i = 0; i < others; ++i) {
                auto o = greedy_request("o" + std::to_string(i), random_prompt(rng, 1 + int(rng() % 25), V), 15);
                o.params.temperature = 1.0;
                ASSERT_TRUE((*engine)->submit(o, col.sink_for(o.id)).is_ok());
            }
            ASSERT_TRUE((*engine)->submit(r, col.sink_for("x")).is_ok());
            (*engine)->run_until_idle();
            runs.push_back(col.got["x"]);
            ASSERT_EQ(col.got["x"].size(), 3u);
        }
    }
    // The noise of a draw is keyed by the completion position, so batching and MTP (which
    // verifies the same draws in another order of forwards) change nothing.
    ASSERT_EQ(runs.size(), 4u);
    for (size_t k = 1; k < runs.size(); ++k)
        for (int i = 0; i < 3; ++i) EXPECT_EQ(runs[0][i].tokens, runs[k][i].tokens) << "completion " << i << ", run " << k;
    // The three completions draw from distinct streams.
    EXPECT_FALSE(runs[0][0].tokens == runs[0][1].tokens && runs[0][1].tokens == runs[0][2].tokens);
}

TEST(EngineInvariants, PenalisedGreedyWithLogprobsIsTheSameWithMtp) {
    // Penalties read the tokens emitted so far, including those accepted earlier in the same
    // verify run, and logprobs come from each emitted token's own row: MTP must change neither.
    ModelWeights w = make_dummy_weights(engine_test_config(), 81);
    std::mt19937 rng(11);
    const int V = int(w.config.vocab_size);
    std::vector<GenerationRequest> reqs;
    for (int i = 0; i < 6; ++i) {
        GenerationRequest r = greedy_request("p" + std::to_string(i), random_prompt(rng, 5 + int(rng() % 20), V), 24);
        r.params.repetition_penalty = i % 2 ? 1.3 : 1.0;
        r.params.frequency_penalty = i % 3 ? 0.7 : 0.0;
        r.params.presence_penalty = i % 3 == 2 ? 0.4 : 0.0;
        r.params.logprobs = 2;
        r.params.ignore_eos = true;
        reqs.push_back(r);
    }
    std::vector<std::map<std::string, std::map<int, Completion>>> runs;
    for (int spec : {0, 2, 3}) {
        runs.push_back(run_requests(w, spec, reqs));
        ASSERT_EQ(runs.back().size(), reqs.size()) << "k=" << spec;
    }
    for (size_t k = 1; k < runs.size(); ++k)
        for (const auto& r : reqs) {
            const Completion& a = runs[0][r.id][0];
            const Completion& b = runs[k][r.id][0];
            ASSERT_EQ(a.tokens.size(), 24u);
            EXPECT_EQ(a.tokens, b.tokens) << r.id << ", run " << k;
            ASSERT_EQ(a.logprobs.size(), b.logprobs.size()) << r.id;
            for (size_t i = 0; i < a.logprobs.size(); ++i) EXPECT_NEAR(a.logprobs[i], b.logprobs[i], 1e-4) << r.id;
        }
}

TEST(EngineInvariants, StopStringsSpanningTokens) {
    ModelWeights w = make_dummy_weights(engine_test_config(), 81);
    CpuOps ref_ops;
    Qwen36Model ref_model(w, ref_ops);
    std::mt19937 rng(11);
    const auto prompt = random_prompt(rng, 9, int(w.config.vocab_size));
    const auto ref = greedy_reference(ref_model, prompt, 12, KvCacheDtype::kBF16);
    std::string full;
    for (int32_t t : ref) full += FakeDecoder::text_of(t);
    // A stop string made of the last character of token 4's text and the first of token 5's.
    const std::string stop = full.substr(9, 2);
    const size_t first = full.find(stop);  // it may occur even earlier: the earliest match wins
    for (bool include : {false, true}) {
        for (int64_t spec : {0, 3}) {
            CpuOps ops;
            EngineConfig cfg;
            cfg.num_speculative_tokens = spec;
            cfg.max_num_seqs = 16;
            cfg.cache_memory_mb = 16;
            auto engine = Engine::create(w, ops, cfg, std::make_shared<FakeDecoder>());
            ASSERT_TRUE(engine.is_ok()) << engine.status().message();
            Collector col;
            auto r = greedy_request("s", prompt, 12);
            r.params.stop = {"zz-never", stop};
            r.params.include_stop_str_in_output = include;
            ASSERT_TRUE((*engine)->submit(r, col.sink_for("s")).is_ok());
            (*engine)->run_until_idle();
            const Completion& c = col.got["s"][0];
            EXPECT_EQ(c.finish, FinishReason::kStop);
            EXPECT_EQ(c.stop_reason, stop);
            EXPECT_EQ(c.text, full.substr(0, first + (include ? stop.size() : 0)));
            // Generation stopped at the token that completed the stop string (2 characters a token).
            const int64_t last_char = int64_t(first + stop.size()) - 1;
            EXPECT_EQ(c.tokens, std::vector<int32_t>(ref.begin(), ref.begin() + last_char / 2 + 1));
        }
    }
}

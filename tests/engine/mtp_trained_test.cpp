// MTP speculative decoding on the trained test model (models/qwen36-tiny): greedy output with
// MTP k = 1..3 equals MTP off token for token, and the trained head's drafts are accepted at a
// rate well above zero (reported per draft position).
#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "engine_test_util.h"
#include "core/check.h"
#include "io/npy.h"

using namespace qs;
using namespace qs::test;

namespace {

const std::string kModelDir = std::string(QS_SOURCE_DIR) + "/models/qwen36-tiny";

// Greedy requests (EOS ignored) whose prompts are prefixes of the model's held-out text.
std::vector<GenerationRequest> held_out_prompts(std::initializer_list<int> lengths, int max_tokens) {
    auto ids = read_npy_int(kModelDir + "/ref_ids.npy");
    QS_CHECK(ids.is_ok());
    std::vector<GenerationRequest> reqs;
    for (int len : lengths) {
        std::vector<int32_t> p(ids->data.begin(), ids->data.begin() + len);
        reqs.push_back(greedy_request("p" + std::to_string(len), p, max_tokens));
        reqs.back().params.ignore_eos = true;
    }
    return reqs;
}

// The CPU backend, checking every lm_head call over leading rows against the whole linear (its
// first `rows` outputs, bitwise: each output is its own dot product) and recording the width of
// every argmax.
class LeadingRowsCheckingOps final : public CpuOps {
public:
    void linear_leading_rows(const float* x, int64_t T, const LinearWeight& w, int64_t rows, float* y) override {
        CpuOps::linear_leading_rows(x, T, w, rows, y);
        std::vector<float> whole(size_t(T * w.out_features));
        CpuOps::linear(x, T, w, whole.data());
        for (int64_t t = 0; t < T; ++t)
            for (int64_t o = 0; o < rows; ++o)
                if (y[t * rows + o] != whole[size_t(t * w.out_features + o)]) ++mismatches;
        leading_rows.insert(rows);
    }
    void argmax_rows(const float* x, int64_t R, int64_t n, int32_t* out) override {
        CpuOps::argmax_rows(x, R, n, out);
        widths.insert(n);
    }
    void argmax_rows_start(const float* x, int64_t R, int64_t n) override {
        CpuOps::argmax_rows_start(x, R, n);
        widths.insert(n);
    }
    std::set<int64_t> leading_rows, widths;
    int64_t mismatches = 0;
};

}  // namespace

TEST(MtpTrained, GreedyEqualsNoMtpAndDraftsAreAccepted) {
    auto w = load_model_dir(kModelDir);
    ASSERT_TRUE(w.is_ok()) << w.status().message();
    const std::vector<GenerationRequest> reqs = held_out_prompts({5, 12, 23, 40, 61, 80}, 32);
    std::map<int64_t, Collector> by_k;
    std::map<int64_t, std::vector<int64_t>> proposed, accepted;
    for (int64_t k = 0; k <= 3; ++k) {
        CpuOps ops;
        EngineConfig cfg;
        cfg.num_speculative_tokens = k;
        cfg.max_num_seqs = 8;
        cfg.cache_memory_mb = 64;
        auto engine = Engine::create(*w, ops, cfg, nullptr);
        ASSERT_TRUE(engine.is_ok()) << engine.status().message();
        for (const auto& r : reqs) ASSERT_TRUE((*engine)->submit(r, by_k[k].sink_for(r.id)).is_ok());
        (*engine)->run_until_idle();
        proposed[k] = (*engine)->mtp_proposed_by_position();
        accepted[k] = (*engine)->mtp_accepted_by_position();
    }
    for (const auto& r : reqs)
        for (int64_t k = 1; k <= 3; ++k)
            EXPECT_EQ(by_k[k].got[r.id][0].tokens, by_k[0].got[r.id][0].tokens) << r.id << " k=" << k;
    for (int64_t k = 1; k <= 3; ++k) {
        ASSERT_EQ(int64_t(proposed[k].size()), k);
        for (int64_t i = 0; i < k; ++i) {
            const double rate = double(accepted[k][size_t(i)]) / double(std::max<int64_t>(1, proposed[k][size_t(i)]));
            std::printf("MTP k=%lld position %lld: %lld/%lld accepted (%.2f)\n", (long long)k, (long long)i,
                        (long long)accepted[k][size_t(i)], (long long)proposed[k][size_t(i)], rate);
            if (i == 0) {
                EXPECT_GT(rate, 0.3) << "k=" << k;  // random weights would give ~1/vocab
            }
        }
    }
}

// The deferred draft argmax (EngineConfig::mtp_overlap: the last draft forward's ids are taken in
// the next step, after its schedule) proposes the same drafts as waiting for them at once: the
// same tokens, and the same drafts proposed and accepted at every position.
TEST(MtpTrained, DeferredDraftIdsProposeTheSameDrafts) {
    auto w = load_model_dir(kModelDir);
    ASSERT_TRUE(w.is_ok()) << w.status().message();
    const std::vector<GenerationRequest> reqs = held_out_prompts({7, 19, 33, 52}, 24);
    for (int64_t k = 1; k <= 2; ++k) {
        std::map<bool, Collector> got;
        std::map<bool, std::vector<int64_t>> proposed, accepted;
        for (bool overlap : {true, false}) {
            CpuOps ops;
            EngineConfig cfg;
            cfg.num_speculative_tokens = k;
            cfg.mtp_overlap = overlap;
            cfg.max_num_seqs = 8;
            cfg.cache_memory_mb = 64;
            auto engine = Engine::create(*w, ops, cfg, nullptr);
            ASSERT_TRUE(engine.is_ok()) << engine.status().message();
            for (const auto& r : reqs) ASSERT_TRUE((*engine)->submit(r, got[overlap].sink_for(r.id)).is_ok());
            (*engine)->run_until_idle();
            proposed[overlap] = (*engine)->mtp_proposed_by_position();
            accepted[overlap] = (*engine)->mtp_accepted_by_position();
        }
        for (const auto& r : reqs)
            EXPECT_EQ(got[true].got[r.id][0].tokens, got[false].got[r.id][0].tokens) << r.id << " k=" << k;
        EXPECT_EQ(proposed[true], proposed[false]) << "k=" << k;
        EXPECT_EQ(accepted[true], accepted[false]) << "k=" << k;
        EXPECT_GT(accepted[true][0], 0) << "k=" << k;
    }
}

// --speculative-disable-by-batch-size: with more sequences running than the limit no draft is
// proposed (the steps are plain decode steps); at or under it MTP drafts as usual. Greedy output
// is the same either way.
TEST(MtpTrained, DisableByBatchSize) {
    auto w = load_model_dir(kModelDir);
    ASSERT_TRUE(w.is_ok()) << w.status().message();
    // Prefilled in one step, then decoded side by side.
    const std::vector<GenerationRequest> reqs = held_out_prompts({6, 14, 30, 45}, 20);
    std::map<int64_t, Collector> by_limit;
    std::map<int64_t, int64_t> proposed;
    for (int64_t limit : {-1, 3, 4}) {  // -1: MTP off
        CpuOps ops;
        EngineConfig cfg;
        cfg.num_speculative_tokens = limit < 0 ? 0 : 1;
        cfg.speculative_disable_by_batch_size = std::max<int64_t>(limit, 0);
        cfg.max_num_seqs = 8;
        cfg.cache_memory_mb = 64;
        auto engine = Engine::create(*w, ops, cfg, nullptr);
        ASSERT_TRUE(engine.is_ok()) << engine.status().message();
        for (const auto& r : reqs) ASSERT_TRUE((*engine)->submit(r, by_limit[limit].sink_for(r.id)).is_ok());
        (*engine)->run_until_idle();
        const auto& p = (*engine)->mtp_proposed_by_position();
        proposed[limit] = p.empty() ? 0 : p[0];
    }
    // The first step may admit fewer than four (then MTP drafts for them once); after it all four
    // decode side by side for ~19 steps.
    std::printf("drafts proposed: limit 3: %lld, limit 4: %lld\n", (long long)proposed[3], (long long)proposed[4]);
    EXPECT_GE(proposed[4], 4 * 10) << "4 sequences run, the limit is 4: MTP drafts every step";
    EXPECT_LE(proposed[3], 3) << "4 sequences run, the limit is 3: no drafts once all four run";
    for (const auto& r : reqs) {
        EXPECT_EQ(by_limit[3].got[r.id][0].tokens, by_limit[-1].got[r.id][0].tokens) << r.id;
        EXPECT_EQ(by_limit[4].got[r.id][0].tokens, by_limit[-1].got[r.id][0].tokens) << r.id;
    }
}

// Spare-slot mode (--mtp-spare-slots): a verified sequence that accepts every draft takes the
// slot its verify wrote the state after every draft into, instead of replaying the drafts (GDN
// commit). Greedy output with MTP k = 1..3 equals MTP off, with a spare for every sequence (8)
// and with fewer spares than sequences (2: the others commit as before, in the same steps); the
// swaps happen (the trained head's drafts are accepted), and every slot is given back.
TEST(MtpTrained, SpareSlotModeGreedyEqualsNoMtp) {
    auto w = load_model_dir(kModelDir);
    ASSERT_TRUE(w.is_ok()) << w.status().message();
    const std::vector<GenerationRequest> reqs = held_out_prompts({5, 12, 23, 40, 61, 80}, 32);
    auto run = [&](int64_t k, int64_t spares, Collector& col, EngineStats& stats) {
        CpuOps ops;
        EngineConfig cfg;
        cfg.num_speculative_tokens = k;
        cfg.mtp_spare_slots = spares;
        cfg.max_num_seqs = 8;
        cfg.cache_memory_mb = 64;
        auto engine = Engine::create(*w, ops, cfg, nullptr);
        ASSERT_TRUE(engine.is_ok()) << engine.status().message();
        for (const auto& r : reqs) ASSERT_TRUE((*engine)->submit(r, col.sink_for(r.id)).is_ok());
        (*engine)->run_until_idle();
        stats = (*engine)->stats();
        EXPECT_EQ((*engine)->num_slots_in_use(), 0) << "k=" << k << " spares=" << spares;
    };
    Collector off;
    EngineStats off_stats;
    run(0, 0, off, off_stats);
    for (int64_t k = 1; k <= 3; ++k)
        for (int64_t spares : {8, 2}) {
            Collector col;
            EngineStats st;
            run(k, spares, col, st);
            for (const auto& r : reqs)
                EXPECT_EQ(col.got[r.id][0].tokens, off.got[r.id][0].tokens) << r.id << " k=" << k << " spares=" << spares;
            std::printf("MTP k=%lld spares %lld: %lld spare-slot swaps, %lld/%lld drafts accepted\n", (long long)k,
                        (long long)spares, (long long)st.mtp_spare_slot_swaps, (long long)st.mtp_accepted_tokens,
                        (long long)st.mtp_draft_tokens);
            EXPECT_GT(st.mtp_spare_slot_swaps, 0) << "k=" << k << " spares=" << spares;
        }
}

// --speculative-draft-vocab N: the drafts' argmax runs over token ids [0, N) alone (lm_head's first
// N rows: the same logits as the whole head's first N), the greedy output with MTP k = 2 equals MTP
// off at every N, N = vocab_size proposes exactly the drafts of the whole vocabulary, and a small N
// accepts fewer drafts (most of this text's tokens lie above id 64). Prints the acceptance by N.
TEST(MtpTrained, DraftVocabKeepsOutputsAndDraftsBelowIt) {
    auto w = load_model_dir(kModelDir);
    ASSERT_TRUE(w.is_ok()) << w.status().message();
    const int64_t V = w->config.vocab_size;
    const std::vector<GenerationRequest> reqs = held_out_prompts({5, 23, 61}, 24);
    std::map<int64_t, Collector> by_n;
    std::map<int64_t, std::vector<int64_t>> proposed, accepted;
    for (int64_t n : {int64_t(-1), int64_t(0), V, int64_t(1024), int64_t(256), int64_t(64)}) {  // -1: MTP off
        LeadingRowsCheckingOps ops;
        EngineConfig cfg;
        cfg.num_speculative_tokens = n < 0 ? 0 : 2;
        cfg.speculative_draft_vocab = std::max<int64_t>(n, 0);
        cfg.max_num_seqs = 8;
        cfg.cache_memory_mb = 64;
        auto engine = Engine::create(*w, ops, cfg, nullptr);
        ASSERT_TRUE(engine.is_ok()) << engine.status().message();
        for (const auto& r : reqs) ASSERT_TRUE((*engine)->submit(r, by_n[n].sink_for(r.id)).is_ok());
        (*engine)->run_until_idle();
        if (n >= 0) {
            proposed[n] = (*engine)->mtp_proposed_by_position();
            accepted[n] = (*engine)->mtp_accepted_by_position();
        }
        EXPECT_EQ(ops.mismatches, 0) << "N=" << n;
        if (n > 0 && n < V) {
            EXPECT_EQ(ops.leading_rows, std::set<int64_t>{n}) << "N=" << n;
            EXPECT_TRUE(ops.widths.count(n)) << "N=" << n;  // the drafts' argmax width
            for (int64_t width : ops.widths) EXPECT_TRUE(width == n || width == V) << width;
        } else {
            EXPECT_TRUE(ops.leading_rows.empty()) << "N=" << n;
        }
    }
    for (const auto& r : reqs)
        for (const auto& [n, got] : by_n)
            EXPECT_EQ(got.got.at(r.id).at(0).tokens, by_n[-1].got[r.id][0].tokens) << r.id << " N=" << n;
    EXPECT_EQ(proposed[V], proposed[0]);
    EXPECT_EQ(accepted[V], accepted[0]);
    for (const auto& [n, p] : proposed)
        std::printf("draft vocabulary %lld: accepted %lld/%lld, %lld/%lld by position\n", (long long)(n ? n : V),
                    (long long)accepted[n][0], (long long)p[0], (long long)accepted[n][1], (long long)p[1]);
    auto rate = [&](int64_t n) { return double(accepted[n][0]) / double(std::max<int64_t>(1, proposed[n][0])); };
    EXPECT_GT(rate(0), 0.3);
    EXPECT_LT(rate(64), rate(0));
}

// Self-consistency of the CPU forward on dummy weights: one prefill, token-by-token decode and
// prefill split at arbitrary boundaries must give the same logits (KV cache, conv window and
// recurrent state carried correctly); a sequence batched with others must equal itself alone.
#include <gtest/gtest.h>

#include <numeric>
#include <random>

#include "backend/cpu/cpu_ops.h"
#include "model/single_sequence.h"
#include "test_util.h"

using namespace qs;

namespace {

ModelConfig varied_config() {
    ModelConfig c = tiny_model_config();
    // A pattern beyond 3:1 and a value/key head ratio of 2.
    c.num_hidden_layers = 5;
    c.layer_types = {LayerType::kFullAttention, LayerType::kLinearAttention, LayerType::kLinearAttention,
                     LayerType::kFullAttention, LayerType::kLinearAttention};
    return c;
}

std::vector<int32_t> random_ids(int n, int vocab, uint32_t seed) {
    std::mt19937 rng(seed);
    std::vector<int32_t> ids(static_cast<size_t>(n));
    for (auto& id : ids) id = int32_t(rng() % uint32_t(vocab));
    return ids;
}

}  // namespace

TEST(ForwardConsistency, PrefillEqualsIncrementalAndSplits) {
    const ModelConfig c = varied_config();
    ASSERT_TRUE(c.validate().is_ok()) << c.validate().message();
    ModelWeights w = make_dummy_weights(c, 11);
    CpuOps ops;
    Qwen36Model model(w, ops);
    const int T = 40;
    const auto ids = random_ids(T, int(c.vocab_size), 3);

    SingleSequence whole(model, T);
    const std::vector<float> ref = whole.feed(ids, /*all_rows=*/true);  // [T, V]
    for (float x : ref) ASSERT_TRUE(std::isfinite(x));

    // Token by token.
    SingleSequence inc(model, T);
    std::vector<float> got;
    for (int t = 0; t < T; ++t) {
        auto row = inc.feed({ids[size_t(t)]}, false);
        got.insert(got.end(), row.begin(), row.end());
    }
    EXPECT_LT(test::max_abs_diff(ref, got), 1e-4f);

    // Split prefill at uneven boundaries (crossing KV page boundaries of 16).
    for (std::vector<int> cuts : {std::vector<int>{1, 17, 33}, std::vector<int>{7, 8, 31}, std::vector<int>{15, 16}}) {
        SingleSequence split(model, T);
        std::vector<float> rows;
        int start = 0;
        cuts.push_back(T);
        for (int cut : cuts) {
            auto part = split.feed(std::vector<int32_t>(ids.begin() + start, ids.begin() + cut), true);
            rows.insert(rows.end(), part.begin(), part.end());
            start = cut;
        }
        EXPECT_LT(test::max_abs_diff(ref, rows), 1e-4f) << "cuts at " << cuts[0];
    }
}

TEST(ForwardConsistency, BatchedSequencesEqualSingle) {
    const ModelConfig c = varied_config();
    ModelWeights w = make_dummy_weights(c, 12);
    CpuOps ops;
    Qwen36Model model(w, ops);
    const int V = int(c.vocab_size);
    const std::vector<int> lens = {5, 23, 1, 17};

    // Each alone.
    std::vector<std::vector<float>> alone;
    std::vector<std::vector<int32_t>> prompts;
    for (size_t s = 0; s < lens.size(); ++s) {
        prompts.push_back(random_ids(lens[s], V, uint32_t(100 + s)));
        SingleSequence seq(model, 32);
        alone.push_back(seq.feed(prompts.back(), true));
    }

    // Together: one batch, shared cache, distinct slots and interleaved pages.
    const int64_t bs = 4;
    ModelCache cache(CacheGeometry::for_model(c, 64, bs, int64_t(lens.size()), true, KvCacheDtype::kF32));
    ForwardBatch b;
    int next_page = 0;
    std::vector<std::vector<int32_t>> tables(lens.size());
    for (int p = 0; p < 8; ++p)  // pages handed out round-robin so no sequence's pages are contiguous
        for (size_t s = 0; s < lens.size(); ++s) tables[s].push_back(next_page++);
    for (size_t s = 0; s < lens.size(); ++s) {
        SeqSpan span;
        span.row_begin = int32_t(b.token_ids.size());
        span.num_tokens = lens[s];
        span.start_pos = 0;
        span.state_slot = int32_t(lens.size() - 1 - s);
        span.block_table = tables[s];
        b.token_ids.insert(b.token_ids.end(), prompts[s].begin(), prompts[s].end());
        b.seqs.push_back(span);
    }
    b.logits_rows.resize(b.token_ids.size());
    std::iota(b.logits_rows.begin(), b.logits_rows.end(), 0);
    auto out = model.forward(b, cache);
    for (size_t s = 0; s < lens.size(); ++s) {
        std::vector<float> mine(out.logits.begin() + int64_t(b.seqs[s].row_begin) * V,
                                out.logits.begin() + int64_t(b.seqs[s].row_begin + lens[s]) * V);
        EXPECT_LT(test::max_abs_diff(alone[s], mine), 1e-4f) << "sequence " << s;
    }
}

TEST(ForwardConsistency, MtpIncrementalEqualsWhole) {
    const ModelConfig c = varied_config();
    ModelWeights w = make_dummy_weights(c, 13);
    ASSERT_TRUE(w.mtp.present);
    CpuOps ops;
    Qwen36Model model(w, ops);
    const int T = 20;
    const auto ids = random_ids(T, int(c.vocab_size), 5);
    SingleSequence a(model, T);
    a.feed(ids, false);
    const auto whole = a.mtp_over_history(0);  // [T-1, V]
    ASSERT_EQ(whole.size(), size_t((T - 1) * c.vocab_size));
    for (float x : whole) ASSERT_TRUE(std::isfinite(x));
    // Draft rows computed in two parts (MTP KV cache carried) equal the whole.
    SingleSequence b(model, T);
    b.feed(std::vector<int32_t>(ids.begin(), ids.begin() + 9), false);
    auto first = b.mtp_over_history(0);  // rows 0..7
    b.feed(std::vector<int32_t>(ids.begin() + 9, ids.end()), false);
    auto second = b.mtp_over_history(8);  // rows 8..T-2
    first.insert(first.end(), second.begin(), second.end());
    EXPECT_LT(test::max_abs_diff(whole, first), 1e-4f);
}

TEST(ForwardConsistency, KvStorageRoundingIsApplied) {
    ModelConfig c = varied_config();
    // Every expert selected: routing cannot flip, so logits are continuous in the K/V values.
    c.num_experts_per_tok = c.num_experts;
    ModelWeights w = make_dummy_weights(c, 14);
    CpuOps ops;
    Qwen36Model model(w, ops);
    const auto ids = random_ids(24, int(c.vocab_size), 9);
    SingleSequence f32(model, 24, KvCacheDtype::kF32), bf(model, 24, KvCacheDtype::kBF16),
        f8(model, 24, KvCacheDtype::kFP8E4M3);
    auto a = f32.feed(ids, true), b = bf.feed(ids, true), d = f8.feed(ids, true);
    const float e_bf16 = test::max_abs_diff(a, b), e_fp8 = test::max_abs_diff(a, d);
    EXPECT_GT(e_bf16, 0.0f);       // rounding happened
    EXPECT_LT(e_bf16, 0.05f);      // and is small
    EXPECT_GT(e_fp8, e_bf16);      // fp8 is coarser than bf16
}

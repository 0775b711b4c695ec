// Tensor parallel on the CPU backend (issue 22): a model sharded over N ranks (threads with an
// in-process Collective) gives the unsharded model's logits and MTP draft logits — prefill,
// decode steps and the MTP head — for head splits, replicated K/V and key heads, a trained
// checkpoint, and the experts split over the ranks (expert parallel); the pieces (collective,
// row/column selections of BF16 and FP8 weights, expert-parallel shards) and the errors for
// configs that do not split are checked on their own.
#include <gtest/gtest.h>

#include <functional>
#include <random>
#include <thread>

#include "backend/cpu/cpu_collective.h"
#include "backend/cpu/cpu_ops.h"
#include "model/fp8_block.h"
#include "model/single_sequence.h"
#include "model/tensor_parallel.h"
#include "model/weight_shard.h"
#include "test_util.h"

using namespace qs;

namespace {

// Everything one sequence produces: prompt logits (all rows), then one row per decode step,
// then the MTP head's draft logits over the whole history.
struct Trace {
    std::vector<float> prompt, decode, mtp;
};

Trace run_sequence(Qwen36Model& model, const std::vector<int32_t>& prompt, const std::vector<int32_t>& steps) {
    SingleSequence seq(model, int64_t(prompt.size() + steps.size()) + 1);
    Trace t;
    t.prompt = seq.feed(prompt, /*all_rows=*/true);
    for (int32_t id : steps) {
        std::vector<float> row = seq.feed({id}, /*all_rows=*/false);
        t.decode.insert(t.decode.end(), row.begin(), row.end());
    }
    if (model.weights().mtp.present) t.mtp = seq.mtp_over_history(0);
    return t;
}

// The same sequence on `size` ranks, one thread each; returns every rank's trace.
std::vector<Trace> run_sharded(const ModelWeights& full, int size, const std::vector<int32_t>& prompt,
                               const std::vector<int32_t>& steps, bool expert_parallel) {
    InProcessGroup group(size);
    std::vector<ModelWeights> shards;
    for (int r = 0; r < size; ++r) {
        Result<ModelWeights> shard = shard_weights(full, r, size, expert_parallel);
        EXPECT_TRUE(shard.is_ok()) << shard.status().message();
        if (!shard.is_ok()) return {};
        shards.push_back(std::move(shard).value());
    }
    std::vector<Trace> traces(static_cast<size_t>(size));
    std::vector<std::thread> ranks;
    for (int r = 0; r < size; ++r)
        ranks.emplace_back([&, r] {
            CpuOps ops;
            Qwen36Model model(shards[size_t(r)], ops, &group.rank(r));
            traces[size_t(r)] = run_sequence(model, prompt, steps);
        });
    for (std::thread& t : ranks) t.join();
    return traces;
}

std::vector<int32_t> random_ids(int n, int64_t vocab, uint32_t seed) {
    std::mt19937 rng(seed);
    std::vector<int32_t> ids(static_cast<size_t>(n));
    for (int32_t& id : ids) id = int32_t(rng() % uint32_t(vocab));
    return ids;
}

// An FP8 block-scaled LinearWeight [out, in] quantised from `dense` with F32 scales.
LinearWeight fp8_weight(const std::vector<float>& dense, int64_t out, int64_t in) {
    auto codes = std::make_shared<std::vector<uint8_t>>(size_t(out * in));
    auto scales = std::make_shared<std::vector<float>>(size_t(fp8_num_blocks(out) * fp8_num_blocks(in)));
    for (int64_t b = 0; b < fp8_num_blocks(out); ++b) {
        const int64_t rows = std::min<int64_t>(kFp8BlockSize, out - b * kFp8BlockSize);
        EXPECT_TRUE(quantize_fp8_block_row(dense.data() + b * kFp8BlockSize * in, rows, in, DType::kF32,
                                           codes->data() + b * kFp8BlockSize * in,
                                           scales->data() + b * fp8_num_blocks(in)));
    }
    LinearWeight w;
    w.format = WeightFormat::kFP8Block;
    w.out_features = out;
    w.in_features = in;
    w.weight = WeightBuffer{DType::kF8E4M3, {out, in}, codes->data(), codes};
    w.scale_inv = WeightBuffer{DType::kF32, {fp8_num_blocks(out), fp8_num_blocks(in)}, scales->data(), scales};
    return w;
}

float max_abs(const std::vector<float>& v) {
    float m = 0;
    for (float x : v) m = std::max(m, std::fabs(x));
    return m;
}

// Sharded traces equal the unsharded one up to the order of fp32 sums (relative 1e-4 of the
// logits' scale), and all ranks hold identical logits.
void expect_same_model(const ModelWeights& full, int size, int prompt_len, int decode_steps, uint32_t seed,
                       bool expert_parallel = false) {
    CpuOps ops;
    Qwen36Model model(full, ops);
    const auto ids = random_ids(prompt_len + decode_steps, full.config.vocab_size, seed);
    const std::vector<int32_t> prompt(ids.begin(), ids.begin() + prompt_len), steps(ids.begin() + prompt_len, ids.end());
    const Trace ref = run_sequence(model, prompt, steps);
    const std::vector<Trace> got = run_sharded(full, size, prompt, steps, expert_parallel);
    ASSERT_EQ(got.size(), size_t(size));
    const float scale = std::max(1.0f, max_abs(ref.prompt));
    for (int r = 0; r < size; ++r) {
        const Trace& t = got[size_t(r)];
        EXPECT_LT(test::max_abs_diff(ref.prompt, t.prompt), 1e-4f * scale) << "prompt logits, rank " << r << " of " << size;
        EXPECT_LT(test::max_abs_diff(ref.decode, t.decode), 1e-4f * scale) << "decode logits, rank " << r << " of " << size;
        EXPECT_LT(test::max_abs_diff(ref.mtp, t.mtp), 1e-4f * scale) << "MTP logits, rank " << r << " of " << size;
        EXPECT_EQ(t.prompt, got[0].prompt) << "rank " << r << " differs from rank 0";
        EXPECT_EQ(t.mtp, got[0].mtp) << "rank " << r << " differs from rank 0";
    }
    EXPECT_FALSE(ref.mtp.empty());
}

}  // namespace

TEST(TensorParallel, InProcessGroupSumsAndGathersInRankOrder) {
    const int size = 3;
    InProcessGroup group(size);
    std::vector<std::vector<float>> sums(size), gathered(size);
    std::vector<std::thread> ranks;
    for (int r = 0; r < size; ++r)
        ranks.emplace_back([&, r] {
            Collective& c = group.rank(r);
            EXPECT_EQ(c.rank(), r);
            EXPECT_EQ(c.size(), size);
            std::vector<float> x = {float(r + 1), float(10 * (r + 1))};
            c.all_reduce_sum(x.data(), 2);
            sums[size_t(r)] = x;
            // [2 rows, 2 cols] per rank: row i = {100r + i, 100r + i + 0.5}.
            const std::vector<float> local = {100.f * r, 100.f * r + 0.5f, 100.f * r + 1, 100.f * r + 1.5f};
            gathered[size_t(r)].resize(12);
            c.all_gather_columns(local.data(), 2, 2, gathered[size_t(r)].data());
        });
    for (std::thread& t : ranks) t.join();
    const std::vector<float> want_gather = {0, 0.5f, 100, 100.5f, 200, 200.5f, 1, 1.5f, 101, 101.5f, 201, 201.5f};
    for (int r = 0; r < size; ++r) {
        EXPECT_EQ(sums[size_t(r)], (std::vector<float>{6, 60}));
        EXPECT_EQ(gathered[size_t(r)], want_gather);
    }
}

TEST(TensorParallel, TwoRanksEqualOneOnDummyWeights) {
    const ModelWeights w = make_dummy_weights(tiny_model_config(), 31);
    expect_same_model(w, 2, 21, 4, 5);
}

TEST(TensorParallel, FourRanksReplicateKvAndKeyHeads) {
    // tiny: 2 K/V heads and 2 GDN key heads over 4 ranks: each is shared by two ranks.
    const ModelWeights w = make_dummy_weights(tiny_model_config(), 32);
    expect_same_model(w, 4, 18, 3, 6);
}

TEST(TensorParallel, TwoRanksEqualOneOnTheTrainedTinyCheckpoint) {
    Result<ModelWeights> w = load_model_dir(test::source_path("models/qwen36-tiny"));
    ASSERT_TRUE(w.is_ok()) << w.status().message();
    expect_same_model(w.value(), 2, 24, 4, 7);
}

TEST(TensorParallel, ExpertParallelEqualsOneRank) {
    // Experts split over the ranks (each holds E/N whole, the others empty; the shared expert
    // split by intermediate): tiny's 8 experts over 2 and 4 ranks, the trained model's 16 over 2.
    const ModelWeights w = make_dummy_weights(tiny_model_config(), 33);
    expect_same_model(w, 2, 19, 3, 8, /*expert_parallel=*/true);
    expect_same_model(w, 4, 17, 3, 9, /*expert_parallel=*/true);
    Result<ModelWeights> trained = load_model_dir(test::source_path("models/qwen36-tiny"));
    ASSERT_TRUE(trained.is_ok()) << trained.status().message();
    expect_same_model(trained.value(), 2, 22, 3, 10, /*expert_parallel=*/true);
}

TEST(TensorParallel, ExpertParallelShardsHoldTheirExpertsWhole) {
    const ModelWeights w = make_dummy_weights(tiny_model_config(), 34);
    Result<ModelWeights> shard = shard_weights(w, 1, 4, /*expert_parallel=*/true);  // experts 2, 3 of 8
    ASSERT_TRUE(shard.is_ok()) << shard.status().message();
    EXPECT_EQ(shard->config.moe_intermediate_size, w.config.moe_intermediate_size);
    EXPECT_EQ(shard->config.shared_expert_intermediate_size, w.config.shared_expert_intermediate_size / 4);
    const MoeWeights& m = shard->layers[0].moe;
    ASSERT_EQ(m.experts.size(), 8u);
    for (size_t e = 0; e < 8; ++e) {
        const bool mine = e == 2 || e == 3;
        EXPECT_EQ(m.experts[e].gate_proj.out_features, mine ? w.config.moe_intermediate_size : 0) << e;
        EXPECT_EQ(m.experts[e].down_proj.in_features, mine ? w.config.moe_intermediate_size : 0) << e;
    }
    ModelConfig six = tiny_model_config();
    six.num_experts = 6;
    const std::string msg = shard_config(six, 4, /*expert_parallel=*/true).status().message();
    EXPECT_NE(msg.find("num_experts = 6"), std::string::npos) << msg;
    EXPECT_TRUE(shard_config(six, 2, /*expert_parallel=*/true).is_ok());
}

TEST(TensorParallel, ConfigsThatDoNotSplitNameTheField) {
    const ModelConfig c = tiny_model_config();
    auto message = [&](int size) { return shard_config(c, size).status().message(); };
    EXPECT_TRUE(shard_config(c, 1).is_ok());
    EXPECT_NE(message(3).find("num_attention_heads = 4"), std::string::npos) << message(3);
    EXPECT_NE(message(0).find("must be >= 1"), std::string::npos) << message(0);
    ModelConfig odd_vocab = c;
    odd_vocab.vocab_size = 511;
    const std::string m = shard_config(odd_vocab, 2).status().message();
    EXPECT_NE(m.find("vocab_size = 511"), std::string::npos) << m;
    ModelConfig small_moe = c;
    small_moe.moe_intermediate_size = 30;
    const std::string m2 = shard_config(small_moe, 4).status().message();
    EXPECT_NE(m2.find("moe_intermediate_size = 30"), std::string::npos) << m2;
    EXPECT_FALSE(shard_weights(make_dummy_weights(c, 1), 2, 2).is_ok());  // rank outside the group
}

TEST(TensorParallel, Fp8RowAndColumnSelectionsDequantiseToTheSameValues) {
    // A 384 × 256 FP8 weight with distinct block scales; rows [128, 384) and columns [128, 256)
    // dequantise to exactly the full weight's values there.
    std::mt19937 rng(3);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    const int64_t out = 384, in = 256;
    std::vector<float> dense(size_t(out * in));
    for (int64_t i = 0; i < out; ++i)
        for (int64_t j = 0; j < in; ++j) dense[size_t(i * in + j)] = nd(rng) * float(1 + (i / 128) * 3 + (j / 128));
    const LinearWeight w = fp8_weight(dense, out, in);
    auto full_row = [&](int64_t r) {
        std::vector<float> v(static_cast<size_t>(in));
        w.row_to_f32(r, v.data());
        return v;
    };
    Result<LinearWeight> rows = linear_rows(w, {{256, 128}, {0, 128}}, "w");
    ASSERT_TRUE(rows.is_ok()) << rows.status().message();
    ASSERT_EQ(rows.value().out_features, 256);
    std::vector<float> got(static_cast<size_t>(in));
    rows.value().row_to_f32(0, got.data());
    EXPECT_EQ(got, full_row(256));
    rows.value().row_to_f32(200, got.data());
    EXPECT_EQ(got, full_row(72));
    Result<LinearWeight> cols = linear_columns(w, {128, 128}, "w");
    ASSERT_TRUE(cols.is_ok()) << cols.status().message();
    std::vector<float> part(128);
    cols.value().row_to_f32(300, part.data());
    const std::vector<float> whole = full_row(300);
    EXPECT_EQ(part, std::vector<float>(whole.begin() + 128, whole.end()));
    // Off the 128-element block edges: an error naming the tensor.
    const Result<LinearWeight> bad = linear_columns(w, {64, 128}, "layers.0.mlp.experts.3.down_proj");
    ASSERT_FALSE(bad.is_ok());
    EXPECT_NE(bad.status().message().find("layers.0.mlp.experts.3.down_proj"), std::string::npos);
    EXPECT_NE(bad.status().message().find("block edges"), std::string::npos);
}

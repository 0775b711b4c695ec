// Tensor parallel through the engine (issue 22): the engine over a TensorParallelRunner of 2 and
// 4 CPU ranks (model/tensor_parallel_runner.h) serves a mixed batch on the trained test model
// (models/qwen36-tiny) — greedy and seeded sampled requests, penalties, logprobs, n = 2, prompts
// chunked over several steps, and MTP k = 1 and 2 — with the same tokens as the engine over one
// CPU backend, token for token, and logprobs within 2e-3 (the group sums its partial results in
// another order than one backend, and a K/V value that differs in its last fp32 bits can round to
// a neighbouring bf16 in the cache: seen up to 4e-4). The group's
// set-up errors name what does not fit.
#include <gtest/gtest.h>

#include "core/check.h"
#include "engine_test_util.h"
#include "io/npy.h"
#include "model/model_backend.h"
#include "model/tensor_parallel_runner.h"

using namespace qs;
using namespace qs::test;

namespace {

const std::string kModelDir = std::string(QS_SOURCE_DIR) + "/models/qwen36-tiny";

// Prompts are prefixes of the model's held-out text (so greedy output is not degenerate); every
// other request samples with a seed, some with penalties, one with n = 2.
std::vector<GenerationRequest> mixed_requests() {
    auto ids = read_npy_int(kModelDir + "/ref_ids.npy");
    QS_CHECK(ids.is_ok());
    std::vector<GenerationRequest> reqs;
    const std::vector<int> lengths = {7, 23, 40, 61, 80, 33};  // of the 96 held-out ids
    for (size_t i = 0; i < lengths.size(); ++i) {
        const int len = lengths[i];
        std::vector<int32_t> p(ids->data.begin() + int64_t(i), ids->data.begin() + int64_t(i) + len);
        GenerationRequest r = greedy_request("r" + std::to_string(i), p, 24);
        r.params.ignore_eos = true;
        r.params.logprobs = 2;
        if (i % 2 == 1) {
            r.params.temperature = 0.9;
            r.params.top_p = 0.95;
            r.params.top_k = 64;
            r.params.seed = 1000 + i;
        }
        if (i == 3) {
            r.params.presence_penalty = 0.5;
            r.params.repetition_penalty = 1.2;
        }
        if (i == 5) r.params.n = 2;
        reqs.push_back(std::move(r));
    }
    return reqs;
}

struct EngineRun {
    std::map<std::string, std::map<int, Completion>> got;
    int64_t mtp_accepted = 0;
};

// The requests on an engine over one CPU backend (tp 1) or a group of `tp` CPU ranks; prompts
// are chunked by a step budget of 16 tokens.
EngineRun run_engine(const ModelWeights& w, int tp, int64_t spec, const std::vector<GenerationRequest>& reqs) {
    EngineConfig cfg;
    cfg.num_speculative_tokens = spec;
    cfg.max_num_seqs = 4;
    cfg.max_num_batched_tokens = 16;
    cfg.cache_memory_mb = 64;
    CpuOps ops;
    Result<std::unique_ptr<Engine>> engine = invalid_argument("unset");
    if (tp == 1) {
        engine = Engine::create(w, ops, cfg, nullptr);
    } else {
        BackendOptions o;
        o.tensor_parallel_size = tp;
        auto runner = make_tensor_parallel_runner(o, w);
        EXPECT_TRUE(runner.is_ok()) << runner.status().message();
        if (!runner.is_ok()) return {};
        engine = Engine::create(w, std::move(runner).value(), cfg, nullptr);
    }
    EXPECT_TRUE(engine.is_ok()) << engine.status().message();
    if (!engine.is_ok()) return {};
    EngineRun out;
    Collector col;
    for (const auto& r : reqs) EXPECT_TRUE((*engine)->submit(r, col.sink_for(r.id)).is_ok());
    (*engine)->run_until_idle();
    EXPECT_EQ((*engine)->num_blocks_in_use(), 0);
    for (int64_t a : (*engine)->mtp_accepted_by_position()) out.mtp_accepted += a;
    out.got = std::move(col.got);
    return out;
}

void expect_same_outputs(const EngineRun& want, const EngineRun& got, const std::vector<GenerationRequest>& reqs,
                         const std::string& what) {
    for (const auto& r : reqs) {
        ASSERT_EQ(got.got.count(r.id), 1u) << what << " " << r.id;
        for (int i = 0; i < int(r.params.n); ++i) {
            const Completion& a = want.got.at(r.id).at(i);
            const Completion& b = got.got.at(r.id).at(i);
            EXPECT_EQ(int64_t(a.tokens.size()), r.params.max_tokens) << what << " " << r.id;
            EXPECT_EQ(b.tokens, a.tokens) << what << " " << r.id << " completion " << i;
            EXPECT_EQ(b.num_final, 1) << what << " " << r.id;
            ASSERT_EQ(b.logprobs.size(), a.logprobs.size()) << what << " " << r.id;
            for (size_t t = 0; t < a.logprobs.size(); ++t)
                EXPECT_NEAR(b.logprobs[t], a.logprobs[t], 2e-3) << what << " " << r.id << " token " << t;
        }
    }
}

}  // namespace

TEST(TensorParallelEngine, TwoAndFourRanksEqualOneBackendTokenForToken) {
    auto w = load_model_dir(kModelDir);
    ASSERT_TRUE(w.is_ok()) << w.status().message();
    const std::vector<GenerationRequest> reqs = mixed_requests();
    const EngineRun one = run_engine(*w, 1, 0, reqs);
    ASSERT_EQ(one.got.size(), reqs.size());
    // The seeded requests really sample: r1 differs from greedy decoding of its prompt.
    CpuOps ops;
    Qwen36Model model(*w, ops);
    EXPECT_NE(one.got.at("r1").at(0).tokens, greedy_reference(model, reqs[1].prompt_ids, 24, KvCacheDtype::kBF16));
    expect_same_outputs(one, run_engine(*w, 2, 0, reqs), reqs, "tp=2");
    expect_same_outputs(one, run_engine(*w, 4, 0, reqs), reqs, "tp=4");
}

TEST(TensorParallelEngine, MtpOnTwoRanksEqualsOneBackendWithoutMtp) {
    // Seeded output is the same with MTP on or off (docs/ARCHITECTURE.md, "Sampling"), so the
    // reference is one backend without MTP; the drafts must be accepted (the trained head).
    auto w = load_model_dir(kModelDir);
    ASSERT_TRUE(w.is_ok()) << w.status().message();
    ASSERT_TRUE(w->mtp.present);
    const std::vector<GenerationRequest> reqs = mixed_requests();
    const EngineRun one = run_engine(*w, 1, 0, reqs);
    for (int64_t k : {1, 2}) {
        const EngineRun tp = run_engine(*w, 2, k, reqs);
        expect_same_outputs(one, tp, reqs, "tp=2 mtp k=" + std::to_string(k));
        EXPECT_GT(tp.mtp_accepted, 0) << "k=" << k;
    }
}

TEST(TensorParallelEngine, GroupErrorsNameWhatDoesNotFit) {
    const ModelWeights w = make_dummy_weights(tiny_model_config(), 3);
    BackendOptions o;
    o.tensor_parallel_size = 3;
    auto r = make_tensor_parallel_runner(o, w);
    ASSERT_FALSE(r.is_ok());
    EXPECT_NE(r.status().message().find("num_attention_heads = 4"), std::string::npos) << r.status().message();
    EXPECT_NE(r.status().message().find("--tensor-parallel-size"), std::string::npos) << r.status().message();
    // CUDA: one GPU per rank (the error names the count seen); with enough GPUs, refused for now.
    o.tensor_parallel_size = 2;
    o.device = "cuda";
    r = make_tensor_parallel_runner(o, w);
    ASSERT_FALSE(r.is_ok());
    if (cuda_device_count() < 2)
        EXPECT_NE(r.status().message().find("needs 2 GPUs, one per rank; this process sees"), std::string::npos)
            << r.status().message();
    else
        EXPECT_NE(r.status().message().find("not yet run on multi-GPU hardware"), std::string::npos)
            << r.status().message();
    o.device = "cpu";
    o.tensor_parallel_size = 1;
    EXPECT_FALSE(make_tensor_parallel_runner(o, w).is_ok());
    // Each rank holds a slice of lm_head's vocabulary: a draft vocabulary is refused, by name.
    o.tensor_parallel_size = 2;
    auto runner = make_tensor_parallel_runner(o, w);
    ASSERT_TRUE(runner.is_ok()) << runner.status().message();
    EngineConfig cfg;
    cfg.num_speculative_tokens = 1;
    cfg.cache_memory_mb = 16;
    cfg.speculative_draft_vocab = 8;
    auto engine = Engine::create(w, std::move(runner).value(), cfg, nullptr);
    ASSERT_FALSE(engine.is_ok());
    EXPECT_NE(engine.status().message().find("speculative_draft_vocab is not supported with tensor parallel"),
              std::string::npos)
        << engine.status().message();
}

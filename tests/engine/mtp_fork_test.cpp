// MTP with n > 1 (trained test model): the completions forked from the first one must draft
// from their own MTP KV. Seeded sampling with MTP consumes one or two uniforms per token
// depending on whether the draft is accepted, so a draft computed from stale KV (whatever a
// recycled page held before) makes the same seeded request give different text depending on
// what the engine ran earlier. Regression test for forks that copied the prompt's last page
// before the MTP catch-up had written it, and never ran the catch-up for the forked rows.
#include <gtest/gtest.h>

#include "engine_test_util.h"
#include "io/npy.h"

#include <filesystem>

using namespace qs;
using namespace qs::test;

namespace {

std::map<int, Completion> run_seeded(Engine& engine, const GenerationRequest& r, const std::string& id) {
    Collector col;
    GenerationRequest x = r;
    x.id = id;
    EXPECT_TRUE(engine.submit(x, col.sink_for(id)).is_ok());
    engine.run_until_idle();
    return col.got[id];
}

}  // namespace

TEST(MtpFork, SeededNGreaterThanOneIsReproducibleWhateverRanBefore) {
    const std::string dir = std::string(QS_SOURCE_DIR) + "/models/qwen36-tiny";
    if (!std::filesystem::exists(dir)) GTEST_SKIP() << dir << " is absent";
    auto w = load_model_dir(dir);
    ASSERT_TRUE(w.is_ok()) << w.status().message();
    auto ids = read_npy_int(dir + "/ref_ids.npy");
    ASSERT_TRUE(ids.is_ok());
    for (int len : {28, 32}) {  // the prompt ends inside a page / exactly at a page boundary
        GenerationRequest r =
            greedy_request("r", std::vector<int32_t>(ids->data.begin(), ids->data.begin() + len), 24);
        r.params.temperature = 1.0;
        r.params.seed = 77;
        r.params.n = 6;
        r.params.ignore_eos = true;
        std::vector<std::map<int, Completion>> runs;
        {
            CpuOps ops;
            EngineConfig cfg;
            cfg.num_speculative_tokens = 2;
            cfg.max_num_seqs = 8;
            cfg.cache_memory_mb = 16;
            auto engine = Engine::create(*w, ops, cfg, nullptr);
            ASSERT_TRUE(engine.is_ok()) << engine.status().message();
            runs.push_back(run_seeded(**engine, r, "fresh"));  // pages never written before
            // Dirty the pages with other text, then run the request again (a prefix-cache hit).
            for (int i = 0; i < 2; ++i) {
                GenerationRequest o = greedy_request(
                    "o" + std::to_string(i), std::vector<int32_t>(ids->data.begin() + 10 * i, ids->data.begin() + 10 * i + 40), 12);
                o.params.ignore_eos = true;
                run_seeded(**engine, o, o.id);
            }
            runs.push_back(run_seeded(**engine, r, "again"));
        }
        for (size_t k = 1; k < runs.size(); ++k)
            for (int i = 0; i < 6; ++i)
                EXPECT_EQ(runs[k][i].tokens, runs[0][i].tokens) << "len " << len << " run " << k << " completion " << i;
    }
}

// fit_max_num_seqs: `serve` lowers the default max_num_seqs so that a CPU cache budget holds the
// GDN states with room for KV (the default 512 states of even the tiny model exceed 256 MB).
#include <gtest/gtest.h>

#include "engine/engine_config.h"

namespace qs {
namespace {

TEST(CapacityFit, LowersMaxNumSeqsUntilStatesTakeAtMostHalfTheBudget) {
    const ModelConfig m = tiny_model_config();
    EngineConfig c;
    c.cache_memory_mb = 8;
    c.num_speculative_tokens = 0;
    const int64_t fit = fit_max_num_seqs(m, c, /*with_mtp=*/false);
    ASSERT_GE(fit, 1);
    ASSERT_LT(fit, c.max_num_seqs);  // 512 states of even the builtin tiny model exceed 4 MB
    auto state_bytes = [&](int64_t seqs, int64_t spec) {
        EngineConfig e = c;
        e.max_num_seqs = seqs;
        e.num_speculative_tokens = spec;
        e.num_kv_blocks = 1;
        auto p = plan_capacity(m, e, spec > 0);
        EXPECT_TRUE(p.is_ok());
        return size_t(p->total_state_slots()) * p->state_bytes_per_slot;
    };
    const size_t half = (size_t(c.cache_memory_mb) << 20) / 2;
    {
        EXPECT_LE(state_bytes(fit, 0), half);
        EXPECT_GT(state_bytes(fit + 1, 0), half);  // the largest that fits
    }
    // The fitted config plans (KV gets the other half).
    EngineConfig fitted = c;
    fitted.max_num_seqs = fit;
    auto plan = plan_capacity(m, fitted, false);
    ASSERT_TRUE(plan.is_ok()) << plan.status().message();
    EXPECT_GT(plan->num_kv_blocks, 0);

    // MTP backups double the running slots' cost: fewer sequences fit.
    EngineConfig spec = c;
    spec.num_speculative_tokens = 2;
    EXPECT_LE(fit_max_num_seqs(m, spec, true), fit);
}

TEST(CapacityFit, KeepsWhatFitsAndFixedKvBlocks) {
    const ModelConfig m = tiny_model_config();
    EngineConfig c;
    c.max_num_seqs = 2;
    EXPECT_EQ(fit_max_num_seqs(m, c, false), 2);
    c.max_num_seqs = 100000;
    c.num_kv_blocks = 4;  // the caller sized it: nothing to fit
    EXPECT_EQ(fit_max_num_seqs(m, c, false), 100000);
    c.num_kv_blocks = 0;
    c.cache_memory_mb = 1;
    EXPECT_GE(fit_max_num_seqs(m, c, false), 1);  // never below one
}

}  // namespace
}  // namespace qs

// fit_max_num_seqs: EngineConfig::fitted (serve, generate --input, capacity) lowers the default
// max_num_seqs so that a CPU cache budget holds the GDN states with room for KV (the default 512
// states of even the tiny model exceed 256 MB).
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

    // MTP's stash of verify-row GDN inputs costs state memory: no more sequences fit.
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

// A budget the caller measured below zero (gpu_forward_bench on an H100 at --gpu-memory-utilization 0.5,
// session 36) is refused by name instead of wrapping around into an absurd plan.
TEST(CapacityPlan, BudgetBelowOneMegabyteIsRefusedByName) {
    const ModelConfig m = tiny_model_config();
    EngineConfig c;
    c.max_num_seqs = 2;
    for (int64_t mb : {int64_t(-7875), int64_t(0)}) {
        c.cache_memory_mb = mb;
        auto p = plan_capacity(m, c, false);
        ASSERT_FALSE(p.is_ok()) << mb;
        EXPECT_EQ(p.status().kind(), ErrorKind::kInvalidArgument);
        EXPECT_NE(p.status().message().find("cache_memory_mb must be >= 1, got " + std::to_string(mb)), std::string::npos)
            << p.status().message();
    }
    c.cache_memory_mb = -1;
    c.num_kv_blocks = 4;  // pages given: the budget is not read
    EXPECT_TRUE(plan_capacity(m, c, false).is_ok());
}

// Per-slot GDN state of the real model, from the spec's numbers (30 GDN layers; conv window 3 ×
// conv_dim 8192 fp32; recurrent state 32 value heads × 128 × 128): fp32 65,863,680 bytes, and
// with --gdn-state-dtype bf16 the recurrent part halves (34,406,400). The freed bytes become KV.
TEST(CapacityPlan, Bf16StateHalvesTheRecurrentStateAndGivesTheRestToKv) {
    const ModelConfig m = qwen36_35b_a3b_config();
    EngineConfig c;
    c.cache_memory_mb = 60000;
    c.max_num_seqs = 512;
    c.enable_prefix_caching = false;
    const size_t conv = size_t(3) * 8192 * 4, ssm = size_t(32) * 128 * 128;
    auto f32 = plan_capacity(m, c, false);
    ASSERT_TRUE(f32.is_ok()) << f32.status().message();
    EXPECT_EQ(f32->state_bytes_per_slot, 30 * (conv + ssm * 4));
    c.gdn_state_bf16 = true;
    auto bf16 = plan_capacity(m, c, false);
    ASSERT_TRUE(bf16.is_ok()) << bf16.status().message();
    EXPECT_EQ(bf16->state_bytes_per_slot, 30 * (conv + ssm * 2));
    const size_t freed = 512 * (f32->state_bytes_per_slot - bf16->state_bytes_per_slot);
    const int64_t extra_blocks = bf16->num_kv_blocks - f32->num_kv_blocks;
    const size_t block_bytes = f32->kv_bytes_per_token * size_t(c.kv_block_size);
    EXPECT_EQ(extra_blocks, int64_t(freed / block_bytes)) << "freed state bytes go to KV pages (±1 for rounding)";
    EXPECT_NE(c.describe().find("gdn_state_dtype=bf16"), std::string::npos);
}

TEST(CapacityPlan, GdnStateDtypeFlag) {
    const char* good[] = {"--gdn-state-dtype", "bf16"};
    auto a = Args::parse(2, const_cast<char**>(good), EngineConfig::flag_options(), EngineConfig::valued_options());
    ASSERT_TRUE(a.is_ok());
    auto c = EngineConfig::from_args(*a);
    ASSERT_TRUE(c.is_ok());
    EXPECT_TRUE(c->gdn_state_bf16);
    const char* bad[] = {"--gdn-state-dtype", "fp16"};
    auto b = Args::parse(2, const_cast<char**>(bad), EngineConfig::flag_options(), EngineConfig::valued_options());
    ASSERT_TRUE(b.is_ok());
    auto e = EngineConfig::from_args(*b);
    ASSERT_FALSE(e.is_ok());
    EXPECT_NE(e.status().message().find("--gdn-state-dtype"), std::string::npos);
}

}  // namespace
}  // namespace qs

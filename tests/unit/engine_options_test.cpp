// The engine's option table (config/engine_options): one entry per option, knob names as the
// sweep and the messages use them, ranges and choices checked with messages naming the knob or
// the flag.
#include "config/engine_options.h"

#include <gtest/gtest.h>

#include <algorithm>

namespace qs {
namespace {

TEST(EngineOptions, NamesAndKnobsAreUniqueAndEveryOptionHasHelp) {
    std::set<std::string_view> names, knobs;
    for (const EngineOption& o : engine_options()) {
        EXPECT_TRUE(names.insert(o.name).second) << o.name;
        EXPECT_TRUE(knobs.insert(o.knob).second) << o.knob;
        EXPECT_FALSE(o.help.empty()) << o.name;
        if (o.kind == OptionKind::kChoice) {
            EXPECT_FALSE(o.choices.empty()) << o.name;
        }
    }
    // A valued option's knob is its flag with '_' (QS_MAX_NUM_SEQS, --max-num-seqs, max_num_seqs);
    // an off switch's knob is what it turns off.
    for (const EngineOption& o : engine_options()) {
        if (!o.takes_value()) continue;
        std::string flag(o.name);
        std::replace(flag.begin(), flag.end(), '-', '_');
        EXPECT_EQ(o.knob, flag);
    }
    EXPECT_EQ(engine_option("no-prefix-caching").knob, "prefix_caching");
    EXPECT_EQ(engine_option("no-chunked-prefill").kind, OptionKind::kOffSwitch);
}

TEST(EngineOptions, FlagAndValuedNamesSplitTheTable) {
    const auto valued = engine_valued_option_names(), flags = engine_flag_option_names();
    EXPECT_EQ(valued.size() + flags.size(), engine_options().size());
    EXPECT_EQ(flags, (std::set<std::string>{"no-chunked-prefill", "no-prefix-caching", "no-mtp-overlap"}));
    for (const char* n : {"max-num-seqs", "kv-cache-dtype", "gdn-state-dtype", "gpu-memory-utilization"})
        EXPECT_EQ(valued.count(n), 1u) << n;
}

TEST(EngineOptions, RangesNameTheKnob) {
    const EngineOption& seqs = engine_option("max-num-seqs");
    EXPECT_TRUE(check_option_range(seqs, 1).is_ok());
    EXPECT_EQ(check_option_range(seqs, 0).message(), "max_num_seqs must be >= 1, got 0");
    const EngineOption& block = engine_option("kv-block-size");
    EXPECT_TRUE(check_option_range(block, 1024).is_ok());
    EXPECT_EQ(check_option_range(block, 1025).message(), "kv_block_size must be in [1, 1024], got 1025");
    const EngineOption& spec = engine_option("num-speculative-tokens");
    EXPECT_TRUE(check_option_range(spec, 0).is_ok());
    EXPECT_EQ(check_option_range(spec, 4).message(), "num_speculative_tokens must be in [0, 3], got 4");
    // An open lower end: 0 is refused, 1 (the closed upper end) accepted.
    const EngineOption& util = engine_option("gpu-memory-utilization");
    EXPECT_TRUE(check_option_range(util, 1.0).is_ok());
    EXPECT_TRUE(check_option_range(util, 0.05).is_ok());
    EXPECT_EQ(check_option_range(util, 0.0).message(), "gpu_memory_utilization must be in (0, 1], got 0");
    EXPECT_EQ(check_option_range(util, 1.5).message(), "gpu_memory_utilization must be in (0, 1], got 1.5");
    // An off value outside the range: -1 passes, other values below 0 do not.
    const EngineOption& accept = engine_option("benchmark-mtp-acceptance");
    EXPECT_TRUE(check_option_range(accept, -1).is_ok());
    EXPECT_TRUE(check_option_range(accept, 0).is_ok());
    EXPECT_EQ(check_option_range(accept, -0.5).message(),
              "benchmark_mtp_acceptance must be in [0, 1] (or -1: off), got -0.5");
}

TEST(EngineOptions, ChoicesResolveAliasesAndListTheChoices) {
    const EngineOption& kv = engine_option("kv-cache-dtype");
    EXPECT_EQ(canonical_choice(kv, "fp8").value(), "fp8_e4m3");
    EXPECT_EQ(canonical_choice(kv, "fp8_e4m3").value(), "fp8_e4m3");
    EXPECT_EQ(canonical_choice(kv, "f32").value(), "f32");
    auto bad = canonical_choice(kv, "fp16");
    ASSERT_FALSE(bad.is_ok());
    EXPECT_EQ(bad.status().message(), "--kv-cache-dtype must be 'bf16', 'fp8_e4m3' or 'f32', got 'fp16'");
    auto state = canonical_choice(engine_option("gdn-state-dtype"), "fp16");
    ASSERT_FALSE(state.is_ok());
    EXPECT_EQ(state.status().message(), "--gdn-state-dtype must be 'f32' or 'bf16', got 'fp16'");
}

}  // namespace
}  // namespace qs

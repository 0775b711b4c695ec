// EngineConfig against the option table: every option of the table is parsed and validated by
// EngineConfig::from_args (an option added to the table but not bound to a field fails here),
// the cache dtypes have one parser and one default, and max_num_seqs is changed after parsing
// only by fitted(), only when it was not set, and never into an invalid config.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "config/engine_options.h"
#include "engine/engine_config.h"

namespace qs {
namespace {

Result<EngineConfig> parse(std::vector<std::string> argv) {
    std::vector<char*> p;
    for (auto& a : argv) p.push_back(a.data());
    auto args = Args::parse(int(p.size()), p.data(), EngineConfig::flag_options(), EngineConfig::valued_options());
    if (!args.is_ok()) return args.status();
    return EngineConfig::from_args(*args);
}

std::string text(double v) {
    char b[32];
    std::snprintf(b, sizeof b, "%g", v);
    return b;
}

TEST(EngineConfig, EveryOptionOfTheTableIsParsedAndValidated) {
    ASSERT_EQ(EngineConfig::valued_options(), engine_valued_option_names());
    ASSERT_EQ(EngineConfig::flag_options(), engine_flag_option_names());
    const std::string defaults = EngineConfig().describe();
    for (const EngineOption& o : engine_options()) {
        const std::string flag = "--" + std::string(o.name);
        switch (o.kind) {
            case OptionKind::kInt:
            case OptionKind::kReal: {
                // Just outside the range: below the minimum (or at an open one), or above a maximum.
                double bad = o.min_open ? o.min : std::isinf(o.max) ? o.min - 1 : o.max + 1;
                if (o.off_value && bad == *o.off_value) bad -= 1;  // the off value itself is allowed
                auto c = parse({flag, text(bad)});
                ASSERT_FALSE(c.is_ok()) << flag << " " << text(bad) << " was accepted: not bound to a field";
                EXPECT_NE(c.status().message().find(std::string(o.knob) + " must be"), std::string::npos)
                    << c.status().message();
                break;
            }
            case OptionKind::kChoice: {
                auto c = parse({flag, "bogus"});
                ASSERT_FALSE(c.is_ok()) << flag;
                EXPECT_NE(c.status().message().find(flag + " must be"), std::string::npos) << c.status().message();
                for (std::string_view v : o.choices) EXPECT_TRUE(parse({flag, std::string(v)}).is_ok()) << flag << v;
                break;
            }
            case OptionKind::kOffSwitch: {
                auto c = parse({flag});
                ASSERT_TRUE(c.is_ok()) << flag;
                EXPECT_NE(c->describe(), defaults) << flag << " changed nothing";
                EXPECT_NE(c->describe().find(std::string(o.knob) + "=false"), std::string::npos) << c->describe();
                break;
            }
        }
    }
}

TEST(EngineConfig, CacheDtypesHaveOneDefaultAndAcceptTheAlias) {
    auto none = parse({});
    ASSERT_TRUE(none.is_ok());
    EXPECT_EQ(none->kv_cache_dtype, KvCacheDtype::kBF16);
    EXPECT_EQ(none->kv_cache_dtype, EngineConfig().kv_cache_dtype);
    EXPECT_FALSE(none->gdn_state_bf16);
    EXPECT_EQ(parse({"--kv-cache-dtype", "fp8"})->kv_cache_dtype, KvCacheDtype::kFP8E4M3);
    EXPECT_EQ(parse({"--kv-cache-dtype=f32"})->kv_cache_dtype, KvCacheDtype::kF32);
    EXPECT_TRUE(parse({"--gdn-state-dtype", "bf16"})->gdn_state_bf16);
}

TEST(EngineConfig, MaxNumSeqsIsFittedOnlyWhenNotSet) {
    const ModelConfig m = tiny_model_config();
    auto dflt = parse({"--cache-memory-mb", "8"});
    ASSERT_TRUE(dflt.is_ok());
    EXPECT_FALSE(dflt->max_num_seqs_set);
    const int64_t fit = fit_max_num_seqs(m, *dflt, false);
    ASSERT_LT(fit, 512);  // 512 tiny-model states exceed 4 MB (capacity_fit_test)
    const EngineConfig fitted = dflt->fitted(m, false);
    EXPECT_EQ(fitted.max_num_seqs, fit);
    EXPECT_TRUE(fitted.validate().is_ok());
    EXPECT_TRUE(plan_capacity(m, fitted, false).is_ok());

    auto given = parse({"--cache-memory-mb", "8", "--max-num-seqs", "512"});
    ASSERT_TRUE(given.is_ok());
    EXPECT_TRUE(given->max_num_seqs_set);
    EXPECT_EQ(given->fitted(m, false).max_num_seqs, 512);  // the user's choice stands (plan_capacity may refuse it)

    // Without chunked prefill the token budget bounds max_num_seqs from above; lowering keeps it valid.
    auto tight = parse({"--cache-memory-mb", "8", "--no-chunked-prefill", "--max-num-batched-tokens", "512"});
    ASSERT_TRUE(tight.is_ok()) << tight.status().message();
    EXPECT_TRUE(tight->fitted(m, false).validate().is_ok());
}

TEST(EngineConfig, PrefillCapNeedsChunkedPrefill) {
    auto ok = parse({"--max-prefill-tokens-with-decodes", "2048"});
    ASSERT_TRUE(ok.is_ok()) << ok.status().message();
    EXPECT_EQ(ok->max_prefill_tokens_with_decodes, 2048);
    auto bad = parse({"--max-prefill-tokens-with-decodes", "2048", "--no-chunked-prefill"});
    ASSERT_FALSE(bad.is_ok());
    EXPECT_NE(bad.status().message().find("max_prefill_tokens_with_decodes needs chunked prefill"), std::string::npos)
        << bad.status().message();
}

}  // namespace
}  // namespace qs

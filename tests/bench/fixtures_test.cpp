// Fixture generator: reproducibility (same seed, same bytes), lengths within bounds, the context
// limit, and JSONL round trips with errors that name the line.
#include "../common/test_files.h"
#include "bench/fixtures.h"

#include "../tokenizer/tokenizer_test_util.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <fstream>
#include <sstream>

namespace qs::bench {
namespace {

std::string temp_path(const std::string& name) {
    return ::testing::TempDir() + "qs_bench_" + std::to_string(::getpid()) + "_" + name;
}

size_t word_count(const std::string& s) {
    size_t n = s.empty() ? 0 : 1;
    for (char c : s) n += c == ' ';
    return n;
}

TEST(BenchFixtures, SameSeedSameFileDifferentSeedDifferentFile) {
    FixtureOptions o;
    o.num_requests = 50;
    o.seed = 7;
    std::string a = temp_path("a.jsonl"), b = temp_path("b.jsonl"), c = temp_path("c.jsonl");
    ASSERT_TRUE(write_fixture(a, generate_fixture(o).value()).is_ok());
    ASSERT_TRUE(write_fixture(b, generate_fixture(o).value()).is_ok());
    o.seed = 8;
    ASSERT_TRUE(write_fixture(c, generate_fixture(o).value()).is_ok());
    EXPECT_FALSE(qs::test::read_if_exists(a).empty());
    EXPECT_EQ(qs::test::read_if_exists(a), qs::test::read_if_exists(b));
    EXPECT_NE(qs::test::read_if_exists(a), qs::test::read_if_exists(c));
    std::remove(a.c_str()), std::remove(b.c_str()), std::remove(c.c_str());
}

TEST(BenchFixtures, SeedWorkloadShapeWithinBounds) {
    for (std::string dist : {"uniform", "normal"}) {
        FixtureOptions o;  // defaults: 200-1800 prompt, 256 completion, 2048 context
        o.num_requests = 400;
        o.seed = 3;
        o.distribution = dist;
        auto reqs = generate_fixture(o).value();
        ASSERT_EQ(reqs.size(), 400u);
        int64_t lo = 1 << 30, hi = 0, full_completion = 0;
        for (const auto& r : reqs) {
            EXPECT_GE(r.prompt_tokens, 200);
            EXPECT_LE(r.prompt_tokens, 1800);
            lo = std::min(lo, r.prompt_tokens), hi = std::max(hi, r.prompt_tokens);
            int64_t mt = r.body["max_tokens"].get<int64_t>();
            EXPECT_LE(mt, 256);
            EXPECT_LE(r.prompt_tokens + mt + kChatTemplateOverhead, 2048);
            full_completion += mt == 256;
            EXPECT_EQ(r.endpoint, "/v1/chat/completions");
            const std::string& text =
                r.body["messages"][0]["content"].get_ref<const std::string&>();
            EXPECT_EQ(word_count(text), size_t(r.prompt_tokens - 5));  // 6-digit number + words
            EXPECT_EQ(r.body["chat_template_kwargs"]["enable_thinking"], false);
            EXPECT_EQ(r.body["ignore_eos"], true);
        }
        EXPECT_GT(full_completion, 300) << dist;  // only the longest prompts lose completion room
        EXPECT_LT(lo, 500) << dist;               // the range is actually used
        EXPECT_GT(hi, 1500) << dist;
    }
}

TEST(BenchFixtures, TextPromptLengthIsExactWithTheQwenTokenizer) {
    const tok::Tokenizer* t = tok::testing::qwen3();
    if (!t) GTEST_SKIP() << "no Qwen3 tokenizer at " << tok::testing::qwen3_dir();
    FixtureOptions o;
    o.num_requests = 40;
    o.seed = 5;
    o.min_prompt = 7, o.max_prompt = 1800;
    auto reqs = generate_fixture(o).value();
    for (const auto& r : reqs) {
        const auto& text = r.body["messages"][0]["content"].get_ref<const std::string&>();
        EXPECT_EQ(int64_t(t->encode(text).size()), r.prompt_tokens);
    }
}

TEST(BenchFixtures, TokenIdPromptsHaveExactLength) {
    FixtureOptions o;
    o.num_requests = 20;
    o.token_ids = true;
    o.min_prompt = 10, o.max_prompt = 30, o.max_tokens = 5;
    auto reqs = generate_fixture(o).value();
    for (const auto& r : reqs) {
        EXPECT_EQ(r.endpoint, "/v1/completions");
        EXPECT_EQ(int64_t(r.body["prompt"].size()), r.prompt_tokens);
        EXPECT_EQ(r.body["max_tokens"], 5);
    }
}

TEST(BenchFixtures, RoundTripAndErrors) {
    FixtureOptions o;
    o.num_requests = 5;
    auto reqs = generate_fixture(o).value();
    std::string p = temp_path("rt.jsonl");
    ASSERT_TRUE(write_fixture(p, reqs).is_ok());
    auto back = read_fixture(p);
    ASSERT_TRUE(back.is_ok()) << back.status().message();
    ASSERT_EQ(back->size(), 5u);
    for (size_t i = 0; i < 5; ++i) EXPECT_EQ(fixture_line((*back)[i]), fixture_line(reqs[i]));

    std::ofstream(p) << fixture_line(reqs[0]) << "\n{\"body\": 3}\n";
    auto bad = read_fixture(p);
    ASSERT_FALSE(bad.is_ok());
    EXPECT_NE(bad.status().message().find(":2:"), std::string::npos) << bad.status().message();
    std::remove(p.c_str());
    EXPECT_FALSE(read_fixture(p).is_ok());

    o.max_prompt = 2040;
    EXPECT_FALSE(generate_fixture(o).is_ok());
    o.max_prompt = 100;
    EXPECT_FALSE(generate_fixture(o).is_ok());  // below min_prompt
}

}  // namespace
}  // namespace qs::bench

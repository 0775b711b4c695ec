// ShareGPT datasets to bench requests, on the committed tests/data/sharegpt/sample.json with a
// whitespace word count standing in for the tokenizer (tests/e2e/test_bench_open_loop.py runs
// the same file through `qwenserve bench` with the Qwen tokenizer against HF tokenizers' counts).
#include "bench/sharegpt.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>
#include <sstream>

namespace qs::bench {
namespace {

const std::string kFile = std::string(QS_SOURCE_DIR) + "/tests/data/sharegpt/sample.json";

int64_t words(std::string_view text) {
    std::istringstream in{std::string(text)};
    int64_t n = 0;
    for (std::string w; in >> w;) ++n;
    return n;
}

ShareGptOptions small_limits() {
    ShareGptOptions o;
    o.max_prompt_tokens = 600;  // long-prompt has 701 words
    o.max_total_tokens = 1000;  // long-total has 501 + 700
    return o;
}

std::string prompt_of(const FixtureRequest& r) { return r.body["messages"][0]["content"].get<std::string>(); }

TEST(ShareGpt, KeepsFirstHumanTurnWithItsAnswerLengthAndFilters) {
    auto reqs = load_sharegpt(kFile, small_limits(), words);
    ASSERT_TRUE(reqs.is_ok()) << reqs.status().message();
    // Expected by hand from the file: the prompt's first words → the answer's word count.
    std::map<std::string, int64_t> want = {{"[[repeat]] Write two lines", 14},
                                           {"[[repeat]] Name three colours", 10},
                                           {"[[repeat]] Translate 'good morning'", 7},
                                           {"[[repeat]] Write a Python", 8}};
    ASSERT_EQ(reqs->size(), want.size());
    std::set<std::string> seen;
    for (const auto& r : *reqs) {
        const std::string p = prompt_of(r);
        auto it = std::find_if(want.begin(), want.end(), [&](const auto& w) { return p.rfind(w.first, 0) == 0; });
        ASSERT_NE(it, want.end()) << p;
        seen.insert(it->first);
        EXPECT_EQ(r.body["max_tokens"], it->second) << p;
        EXPECT_EQ(r.prompt_tokens, words(p));
        EXPECT_EQ(r.endpoint, "/v1/chat/completions");
        EXPECT_EQ(r.body["messages"].size(), 1u);
        EXPECT_EQ(r.body["messages"][0]["role"], "user");
        EXPECT_EQ(r.body["model"], "qwen3.6-35b-a3b");
        EXPECT_EQ(r.body["ignore_eos"], true);
    }
    EXPECT_EQ(seen.size(), want.size());
}

TEST(ShareGpt, VllmDefaultLimitsKeepLongPromptsUnder1024) {
    auto reqs = load_sharegpt(kFile, ShareGptOptions{}, words);  // 1024 / 2048: both long ones pass by words
    ASSERT_TRUE(reqs.is_ok());
    EXPECT_EQ(reqs->size(), 6u);
}

TEST(ShareGpt, SeedShufflesNumRequestsCapsOutputLenOverrides) {
    ShareGptOptions o = small_limits();
    auto a = load_sharegpt(kFile, o, words), b = load_sharegpt(kFile, o, words);
    ASSERT_TRUE(a.is_ok() && b.is_ok());
    std::vector<std::string> pa, pb, pc;
    for (const auto& r : *a) pa.push_back(prompt_of(r));
    for (const auto& r : *b) pb.push_back(prompt_of(r));
    EXPECT_EQ(pa, pb);
    bool other_order = false;
    for (uint64_t seed = 1; seed < 20 && !other_order; ++seed) {
        o.seed = seed;
        auto c = load_sharegpt(kFile, o, words);
        pc.clear();
        for (const auto& r : *c) pc.push_back(prompt_of(r));
        other_order = pc != pa;
        std::vector<std::string> sa = pa, sc = pc;
        std::sort(sa.begin(), sa.end()), std::sort(sc.begin(), sc.end());
        EXPECT_EQ(sa, sc);  // the same set, in another order
    }
    EXPECT_TRUE(other_order);
    o.num_requests = 2;
    EXPECT_EQ(load_sharegpt(kFile, o, words)->size(), 2u);
    o.num_requests = 100;
    o.output_len = 3;  // fixed: the answers' lengths (and their minimum) do not matter
    auto fixed = load_sharegpt(kFile, o, words);
    ASSERT_TRUE(fixed.is_ok());
    for (const auto& r : *fixed) EXPECT_EQ(r.body["max_tokens"], 3);
}

TEST(ShareGpt, BadFilesGetErrorsNamingWhere) {
    auto msg = [](const std::string& text) {
        auto r = parse_sharegpt(text, "d.json", ShareGptOptions{}, words);
        return r.is_ok() ? std::string("ok") : r.status().message();
    };
    EXPECT_NE(msg("{\"conversations\": []}").find("not a JSON list"), std::string::npos);
    EXPECT_NE(msg("[1").find("d.json: not JSON"), std::string::npos);
    EXPECT_NE(msg("[{\"id\": 1}]").find("entry 0: no 'conversations'"), std::string::npos);
    EXPECT_NE(msg(R"([{"conversations": [{"from": "human", "value": 3}]}])").find("entry 0: conversations[0]"),
              std::string::npos);
    EXPECT_NE(msg(R"([{"conversations": [{"from": "human", "value": "a b c d e"}, {"from": "gpt", "value": "x"}]}])")
                  .find("no conversation passed"),
              std::string::npos);
    EXPECT_NE(load_sharegpt("/nonexistent.json", ShareGptOptions{}, words).status().message().find("/nonexistent.json"),
              std::string::npos);
}

}  // namespace
}  // namespace qs::bench

// Needle in a haystack: deterministic filler without digits, prompts near their target size, the
// needle at its depth, exact-answer scoring, and the runner against the FakeEngine server (whose
// byte tokenizer counts one token per byte; the needle "[[reply:{answer}]]" makes the fake answer
// with the needle's number, so every cell must pass, and a needle the fake cannot echo must fail);
// the grid, table and heatmap.
#include "eval/niah.h"

#include <gtest/gtest.h>

#include <cctype>

#include "../server/test_server.h"
#include "bench/svg_heatmap.h"
#include "eval/niah_report.h"

namespace qs::eval {
namespace {

TEST(Niah, FillerIsDeterministicAndHasNoDigits) {
    std::string a = filler_text(5000, 7), b = filler_text(5000, 7), c = filler_text(5000, 8);
    EXPECT_EQ(a, b);
    EXPECT_NE(a, c);
    EXPECT_EQ(a.size(), 5000u);
    for (char ch : a) EXPECT_FALSE(std::isdigit(static_cast<unsigned char>(ch)));
}

TEST(Niah, NeedleSitsAtItsDepth) {
    TokenFit fit{0, 4.0};
    for (double depth : {0.0, 0.1, 0.25, 0.5, 0.75, 0.9, 1.0}) {
        NiahCase c = make_case(8000, depth, 0, 3);
        std::string p = niah_prompt(c, fit, 3);
        EXPECT_NEAR(double(p.size()), 32000, 400) << depth;
        double pos = needle_position(p, c);
        EXPECT_NEAR(pos, depth, 0.01) << depth;
        EXPECT_NE(p.find(needle_sentence(c, "")), std::string::npos);
        EXPECT_EQ(first_number(p), c.answer);  // the needle's is the only number
    }
}

TEST(Niah, CasesDifferAndAnswersHaveSevenDigits) {
    NiahCase a = make_case(4096, 0.5, 0, 1), b = make_case(4096, 0.25, 0, 1);
    EXPECT_NE(a.answer, b.answer);
    EXPECT_EQ(a.answer.size(), 7u);
    EXPECT_EQ(make_case(4096, 0.5, 0, 1).answer, a.answer);
}

TEST(Niah, ExactAnswerScoring) {
    EXPECT_TRUE(niah_correct("4821907", "4821907"));
    EXPECT_TRUE(niah_correct("The number is 4821907.", "4821907"));
    EXPECT_TRUE(niah_correct("<think>maybe 1234567</think>4821907", "4821907"));
    EXPECT_FALSE(niah_correct("48219070", "4821907"));
    EXPECT_FALSE(niah_correct("482 1907", "4821907"));
    EXPECT_FALSE(niah_correct("1234567 or 4821907", "4821907"));
    EXPECT_FALSE(niah_correct("", "4821907"));
}

NiahOptions options_for(int port) {
    NiahOptions o;
    o.url = bench::parse_url("http://127.0.0.1:" + std::to_string(port)).value();
    o.model = "test-model";
    o.lengths = {300, 1000, 2500};
    o.depths = {0, 0.5, 1};
    o.max_model_len = 4096;
    o.max_tokens = 16;
    o.concurrency = 3;
    o.needle_template = "[[reply:{answer}]]";
    return o;
}

TEST(Niah, RunsTheGridAgainstAServer) {
    testing::TestServer server;
    NiahOptions o = options_for(server.port());
    TokenFit fit;
    auto r = run_niah(o, &fit);
    ASSERT_TRUE(r.is_ok()) << r.status().message();
    EXPECT_NEAR(fit.chars_per_token, 1.0, 0.01);  // the byte tokenizer
    ASSERT_EQ(r->size(), 9u);
    for (const auto& x : *r) {
        EXPECT_TRUE(x.passed) << x.c.target_tokens << "@" << x.c.depth << ": " << x.reply
                              << " error " << x.error;
        EXPECT_NEAR(double(x.prompt_tokens), double(x.c.target_tokens), 8)
            << "the calibrated fit sizes prompts to their target";
    }
    NiahGrid g = niah_grid(*r);
    ASSERT_EQ(g.lengths.size(), 3u);
    ASSERT_EQ(g.depths.size(), 3u);
    EXPECT_EQ(g.passed[2][1], 1);
    std::string md = niah_markdown(g);
    EXPECT_NE(md.find("| 2500 |"), std::string::npos) << md;
    std::string html = niah_html_section(g, "r.jsonl");
    EXPECT_NE(html.find("<svg"), std::string::npos);
    EXPECT_NE(html.find(bench::heat_colour(1.0)), std::string::npos);

    // A needle the fake does not echo: the reply is its default text, no number, all fail.
    o.needle_template = "The special magic number for {key} is {answer}.";
    o.lengths = {500};
    o.depths = {0.5};
    auto f = run_niah(o);
    ASSERT_TRUE(f.is_ok()) << f.status().message();
    EXPECT_FALSE((*f)[0].passed);
}

TEST(Niah, RefusesLengthsPastTheContextAndUnreachableServers) {
    NiahOptions o = options_for(1);
    o.lengths = {4090};
    auto r = run_niah(o);
    ASSERT_FALSE(r.is_ok());
    EXPECT_NE(r.status().message().find("exceeds the context"), std::string::npos);
    int port;
    {
        testing::TestServer server;
        port = server.port();
    }
    auto u = run_niah(options_for(port));
    ASSERT_FALSE(u.is_ok());
    EXPECT_EQ(u.status().kind(), ErrorKind::kIo);
}

TEST(Niah, HeatmapColoursAndMissingCells) {
    EXPECT_EQ(bench::heat_colour(0.0), "#d73027");
    EXPECT_EQ(bench::heat_colour(1.0), "#1a9850");
    EXPECT_EQ(bench::heat_colour(NAN), "#dddddd");
    bench::Heatmap h;
    h.title = "t <&>";
    h.x_names = {"0%", "50%"};
    h.y_names = {"4K"};
    h.values = {{1.0}};  // the second cell has no data
    std::string s = bench::svg_heatmap(h);
    EXPECT_NE(s.find("t &lt;&amp;&gt;"), std::string::npos);
    EXPECT_NE(s.find("#dddddd"), std::string::npos);
    EXPECT_NE(s.find("100%"), std::string::npos);
}

}  // namespace
}  // namespace qs::eval

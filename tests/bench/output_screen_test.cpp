// Output screen on synthetic completions fed through the SseReader (as the load generator does):
// exact verdicts for fine, blank, looping, malformed and transport-failed requests; the loop
// rule's thresholds at their edges; counts, examples and pass/fail of a whole pass.
#include "bench/output_screen.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "bench/sse_reader.h"

namespace qs::bench {
namespace {

std::string chunk(const std::string& content) {
    nlohmann::json j = {{"choices", {{{"index", 0}, {"delta", {{"content", content}}}}}}};
    return "data: " + j.dump() + "\n\n";
}
const char* kUsage =
    "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":5}}\n\n";
const char* kDone = "data: [DONE]\n\n";

// A streamed chat completion whose content arrives in `pieces`.
RequestRecord streamed(const std::vector<std::string>& pieces, bool usage = true,
                       bool done = true) {
    RequestRecord r;
    SseReader s(&r, /*keep_text=*/true);
    for (const auto& p : pieces) s.feed(chunk(p), 0.1);
    if (usage) s.feed(kUsage, 0.2);
    if (done) s.feed(kDone, 0.2);
    s.finish(0.3);
    return r;
}

std::string repeat(const std::string& unit, int n) {
    std::string s;
    for (int i = 0; i < n; ++i) s += unit;
    return s;
}

TEST(BenchOutputScreen, FineBlankLoopVerdicts) {
    EXPECT_EQ(screen_record(streamed({"The answer", " is 42."})).verdict, Verdict::kOk);
    // Short repetition is ordinary text: 3 copies, and 9 characters < 64.
    EXPECT_EQ(screen_record(streamed({"ha ha ha "})).verdict, Verdict::kOk);

    auto blank = screen_record(streamed({}));
    EXPECT_EQ(blank.verdict, Verdict::kBlank);
    EXPECT_EQ(blank.why, "no text");
    auto ws = screen_record(streamed({"  \n", "\t "}));
    EXPECT_EQ(ws.verdict, Verdict::kBlank);
    EXPECT_EQ(ws.why, "5 bytes of whitespace only");

    // A real answer, then the same 3-character unit 30 times (cut mid-unit): a loop of period 3.
    auto loop = screen_record(streamed({"Sure. ", repeat("ab ", 15), repeat("ab ", 15), "a"}));
    EXPECT_EQ(loop.verdict, Verdict::kLoop);
    EXPECT_NE(loop.why.find("(3 chars) x 30"), std::string::npos) << loop.why;
    EXPECT_EQ(screen_record(streamed({std::string(64, '-')})).verdict, Verdict::kLoop);
}

TEST(BenchOutputScreen, LoopRuleEdges) {
    // 63 copies of one character: under kLoopMinChars; 64: a loop.
    EXPECT_EQ(find_end_loop(std::string(63, 'x')).period, 0);
    EXPECT_EQ(find_end_loop("Hello " + std::string(64, 'x')).period, 1);
    // A 20-character sentence: 3 copies are fine, 4 copies (80 chars) are a loop.
    const std::string s = "I will say it again.";
    ASSERT_EQ(s.size(), 20u);
    EXPECT_EQ(find_end_loop("Start. " + repeat(s, 3)).period, 0);
    LoopMatch m = find_end_loop("Start. " + repeat(s, 4));
    EXPECT_EQ(m.period, 20);
    EXPECT_EQ(m.repeats, 4);
    // The repetition must be at the end: text after the loop clears it.
    EXPECT_EQ(find_end_loop(repeat(s, 6) + " And then something different happened.").period, 0);
    // The smallest period wins ("abab..." is period 2, not 4).
    EXPECT_EQ(find_end_loop(repeat("ab", 40)).period, 2);
}

TEST(BenchOutputScreen, MalformedResponses) {
    auto no_done = screen_record(streamed({"Hello"}, true, /*done=*/false));
    EXPECT_EQ(no_done.verdict, Verdict::kMalformed);
    EXPECT_EQ(no_done.why, "stream ended without [DONE]");

    auto no_usage = screen_record(streamed({"Hello"}, /*usage=*/false));
    EXPECT_EQ(no_usage.verdict, Verdict::kMalformed);
    EXPECT_EQ(no_usage.why, "no usage chunk");

    RequestRecord bad;
    SseReader s(&bad, true);
    s.feed(chunk("Hello"), 0.1);
    s.feed("data: {\"choices\": [tru\n\n", 0.1);
    s.feed(kUsage, 0.2);
    s.feed(kDone, 0.2);
    s.finish(0.2);
    auto v = screen_record(bad);
    EXPECT_EQ(v.verdict, Verdict::kMalformed);
    EXPECT_EQ(v.why, "1 invalid JSON data line(s)");

    RequestRecord err;
    SseReader se(&err, true);
    se.feed("data: {\"error\":{\"message\":\"boom\"}}\n\n", 0.1);
    se.feed(kDone, 0.1);
    se.finish(0.1);
    EXPECT_EQ(screen_record(err).verdict, Verdict::kMalformed);

    RequestRecord refused;
    refused.error = "connect";
    EXPECT_EQ(screen_record(refused).verdict, Verdict::kUnscreened);
    RequestRecord http;
    http.error = "http_503";
    EXPECT_EQ(screen_record(http).verdict, Verdict::kUnscreened);
}

TEST(BenchOutputScreen, PassReportCountsAndExamples) {
    std::vector<RequestRecord> rs = {
        streamed({"fine"}),               // 0 ok
        streamed({}),                     // 1 blank
        streamed({repeat("loop ", 20)}),  // 2 loop
        streamed({"cut"}, true, false),   // 3 malformed
        streamed({"also fine"}),          // 4 ok
    };
    RequestRecord refused;
    refused.error = "connect";
    rs.push_back(refused);                                   // 5 unscreened
    for (int i = 0; i < 5; ++i) rs.push_back(streamed({}));  // 6..10 blank
    ScreenReport rep = screen_records(rs);
    EXPECT_FALSE(rep.passed());
    EXPECT_FALSE(rep.passed(/*judge_content=*/false));  // the malformed one still fails it
    EXPECT_EQ(rep.num_requests, 11);
    EXPECT_EQ(rep.num_ok, 2);
    EXPECT_EQ(rep.num_blank, 6);
    EXPECT_EQ(rep.num_loop, 1);
    EXPECT_EQ(rep.num_malformed, 1);
    EXPECT_EQ(rep.num_unscreened, 1);
    // At most kMaxExamples per verdict, in request order: blanks 1, 6, 7; loop 2; malformed 3.
    ASSERT_EQ(rep.examples.size(), 5u);
    EXPECT_EQ(rep.examples[0].index, 1);
    EXPECT_EQ(rep.examples[1].index, 2);
    EXPECT_EQ(rep.examples[1].verdict, Verdict::kLoop);
    EXPECT_EQ(rep.examples[2].index, 3);
    EXPECT_EQ(rep.examples[4].index, 7);
    std::string d = rep.describe();
    EXPECT_NE(d.find("6 blank, 1 loop, 1 malformed of 11"), std::string::npos) << d;
    EXPECT_NE(d.find("#2 loop"), std::string::npos) << d;

    EXPECT_TRUE(screen_records({streamed({"a"}), streamed({"b"}), refused}).passed());
}

TEST(BenchOutputScreen, TextTailIsBoundedAndKeepsUtf8) {
    // 3-byte characters streamed past the bound: the kept tail is <= kTextTailBytes, starts on a
    // character boundary, and the loop rule still sees the end.
    std::vector<std::string> pieces(3000, "\xe2\x82\xac");  // U+20AC, 9000 bytes in all
    RequestRecord r = streamed(pieces);
    EXPECT_EQ(r.text_bytes, 9000);
    EXPECT_LE(r.text_tail.size(), kTextTailBytes);
    EXPECT_EQ(r.text_tail.size() % 3, 0u);
    EXPECT_EQ(static_cast<unsigned char>(r.text_tail[0]), 0xE2);
    EXPECT_EQ(screen_record(r).verdict, Verdict::kLoop);
    // Without keep_text nothing is kept.
    RequestRecord plain;
    SseReader s(&plain);
    s.feed(chunk("hello"), 0.1);
    EXPECT_TRUE(plain.text_tail.empty());
    EXPECT_EQ(plain.text_bytes, 0);
}

TEST(BenchOutputScreen, ContentVerdictsGateOnlyWhenJudged) {
    ScreenReport rep = screen_records({streamed({"fine"}), streamed({}), streamed({repeat("-", 70)})});
    EXPECT_EQ(rep.num_blank, 1);
    EXPECT_EQ(rep.num_loop, 1);
    EXPECT_FALSE(rep.passed());
    EXPECT_TRUE(rep.passed(/*judge_content=*/false));
}

TEST(BenchOutputScreen, EscapedTail) {
    EXPECT_EQ(escaped_tail("a\nb\t\"c\"", 100), "a\\nb\\t\\\"c\\\"");
    EXPECT_EQ(escaped_tail("0123456789", 4), "...6789");
    EXPECT_EQ(escaped_tail("x\xe2\x82\xac", 2), "...");  // never starts inside a character
}

}  // namespace
}  // namespace qs::bench

// SseReader: data lines split across reads, TTFT/ITL from content chunks only, usage and
// finish reason, [DONE], and the error kinds a bad stream gets.
#include "bench/sse_reader.h"

#include <gtest/gtest.h>

namespace qs::bench {
namespace {

TEST(BenchSseReader, ChatStreamSplitAcrossReads) {
    RequestRecord r;
    r.start_s = 1.0;
    SseReader s(&r);
    s.feed("data: {\"choices\":[{\"delta\":{\"role\":\"assistant\"}}]}\n\n", 1.1);  // no content
    s.feed("data: {\"choices\":[{\"delta\":{\"content\":\"He\"}}]}\n\ndata: {\"choi", 1.5);
    s.feed("ces\":[{\"delta\":{\"content\":\"llo\"}}]}\r\n\r\n", 1.75);
    s.feed("data: {\"choices\":[{\"delta\":{},\"finish_reason\":\"length\"}]}\n\n", 2.0);
    s.feed("data: {\"choices\":[],\"usage\":{\"prompt_tokens\":7,\"completion_tokens\":3}}\n\n",
           2.0);
    EXPECT_FALSE(s.done());
    s.feed("data: [DONE]\n\n", 2.25);
    s.finish(2.5);
    EXPECT_TRUE(r.done);
    EXPECT_TRUE(r.error.empty());
    EXPECT_DOUBLE_EQ(r.ttft_s, 0.5);
    ASSERT_EQ(r.itl_s.size(), 1u);
    EXPECT_DOUBLE_EQ(r.itl_s[0], 0.25);
    EXPECT_EQ(r.completion_tokens, 3);
    EXPECT_EQ(r.prompt_tokens, 7);
    EXPECT_EQ(r.finish_reason, "length");
    EXPECT_DOUBLE_EQ(r.latency_s, 1.5);
    EXPECT_EQ(s.num_content_chunks(), 2);
}

TEST(BenchSseReader, CompletionsTextChunks) {
    RequestRecord r;
    SseReader s(&r);
    s.feed(
        "data: {\"choices\":[{\"text\":\"a\"}]}\n\ndata: "
        "{\"choices\":[{\"text\":\"b\",\"finish_reason\":\"stop\"}]}\n\n",
        0.5);
    s.feed("data: {\"choices\":[],\"usage\":{\"completion_tokens\":2}}\n\ndata: [DONE]\n\n", 0.5);
    s.finish(0.5);
    EXPECT_EQ(s.num_content_chunks(), 2);
    EXPECT_EQ(r.completion_tokens, 2);
    EXPECT_EQ(r.finish_reason, "stop");
    EXPECT_TRUE(r.error.empty());
}

TEST(BenchSseReader, ErrorsAndMissingUsage) {
    RequestRecord a;
    SseReader sa(&a);
    sa.feed("data: [DONE]\n\n", 0.1);
    sa.finish(0.1);
    EXPECT_EQ(a.error, "no_usage");

    RequestRecord b;
    SseReader sb(&b);
    sb.feed("data: {not json\n\n", 0.1);
    EXPECT_EQ(b.error, "bad_chunk");

    RequestRecord c;
    SseReader sc(&c);
    sc.feed("data: {\"error\":{\"message\":\"boom\"}}\n\n", 0.1);
    EXPECT_EQ(c.error, "stream_error");

    RequestRecord d;  // cut before [DONE]: no error, not done -> counted incomplete
    SseReader sd(&d);
    sd.feed("data: {\"choices\":[{\"delta\":{\"content\":\"x\"}}]}\n", 0.1);
    sd.finish(0.2);
    EXPECT_FALSE(d.done);
    EXPECT_TRUE(d.error.empty());
}

}  // namespace
}  // namespace qs::bench

// Streaming detokenizer: over the whole corpus (and random id sequences that break characters
// apart), the concatenated pieces equal one-shot decode, and every piece is valid UTF-8.
#include <gtest/gtest.h>

#include <random>

#include "tokenizer/detokenizer.h"
#include "tokenizer/unicode.h"
#include "tokenizer_test_util.h"

namespace qs::tok {
namespace {

void expect_stream_equals_decode(const Tokenizer& tok, const std::vector<int32_t>& ids, bool skip) {
    IncrementalDetokenizer detok(tok, skip);
    std::string streamed;
    for (int32_t id : ids) {
        const std::string piece = detok.push(id);
        ASSERT_TRUE(is_valid_utf8(piece));
        ASSERT_LE(detok.pending_bytes(), 3u);
        streamed += piece;
    }
    streamed += detok.finish();
    ASSERT_EQ(streamed, tok.decode(ids, skip));
}

TEST(IncrementalDetokenizer, CorpusStreamsLikeOneShotDecode) {
    QS_REQUIRE_QWEN3();
    const auto texts = testing::corpus();
    ASSERT_GE(texts.size(), 20000u);
    size_t split_chars = 0;
    for (const std::string& s : texts) {
        const auto ids = tok->encode(s);
        for (int32_t id : ids) split_chars += !is_valid_utf8(tok->token_bytes(id));
        expect_stream_equals_decode(*tok, ids, false);
        if (HasFatalFailure()) return;
    }
    EXPECT_GT(split_chars, 1000u);  // the corpus does split characters across tokens
}

TEST(IncrementalDetokenizer, RandomIdsWithSpecialsAndBrokenBytes) {
    QS_REQUIRE_QWEN3();
    std::mt19937 rng(3);
    for (int n = 0; n < 3000; ++n) {
        std::vector<int32_t> ids(1 + rng() % 30);
        for (auto& id : ids) id = (rng() % 10 == 0) ? 151643 + rng() % 26 : rng() % 151643;
        expect_stream_equals_decode(*tok, ids, n % 2 == 0);
        if (HasFatalFailure()) return;
    }
}

}  // namespace
}  // namespace qs::tok

// Tokenizer loading (errors for bad files), encode/decode basics and the special-token API.
// The full parity sweep against HF tokenizers is tools/tokenizer_parity.py (ctest
// tokenizer_parity_*); these are the fast, self-contained checks.
#include <gtest/gtest.h>

#include "tokenizer/pretokenizer.h"
#include "tokenizer/unicode.h"
#include "tokenizer_test_util.h"

namespace qs::tok {
namespace {

const char* kMinimal = R"({
  "added_tokens": [{"id": 300, "content": "<|end|>", "special": true, "normalized": false}],
  "normalizer": {"type": "NFC"},
  "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
     {"type": "Split", "pattern": {"Regex": "\\p{L}+|\\s+|[^\\s\\p{L}]+"}, "behavior": "Isolated", "invert": false},
     {"type": "ByteLevel", "add_prefix_space": false, "use_regex": false}]},
  "post_processor": null,
  "decoder": {"type": "ByteLevel"},
  "model": {"type": "BPE", "vocab": VOCAB, "merges": [["a", "b"], ["ab", "c"]]}
})";

std::string minimal_json(const std::string& model_type = "BPE") {
    std::string vocab = "{";
    // All 256 ByteLevel characters, ids 0..255, then "ab" 256 and "abc" 257.
    for (int b = 0; b < 256; ++b) {
        std::string ch = bytes_to_byte_level(std::string(1, static_cast<char>(b)));
        nlohmann::json key = ch;
        vocab += (b ? "," : "") + key.dump() + ":" + std::to_string(b);
    }
    vocab += R"(,"ab":256,"abc":257})";
    std::string text = kMinimal;
    text.replace(text.find("VOCAB"), 5, vocab);
    if (model_type != "BPE") text.replace(text.find("\"BPE\""), 5, "\"" + model_type + "\"");
    return text;
}

TEST(TokenizerLoad, MinimalFileEncodesWithMerges) {
    auto t = Tokenizer::from_json_text(minimal_json());
    ASSERT_TRUE(t.is_ok()) << t.status().message();
    // Byte b has id b in this vocab, so " " is 32.
    EXPECT_EQ((*t)->encode("abc ab<|end|>"), (std::vector<int32_t>{257, 32, 256, 300}));
    EXPECT_EQ((*t)->decode((*t)->encode("abc ab<|end|>")), "abc ab<|end|>");
    EXPECT_EQ((*t)->decode((*t)->encode("abc<|end|>"), /*skip_special_tokens=*/true), "abc");
    EXPECT_TRUE((*t)->is_special(300));
    EXPECT_EQ((*t)->vocab_size(), 301);
}

TEST(TokenizerLoad, ErrorsNameTheProblem) {
    auto expect_error = [](const std::string& text, const std::string& needle) {
        auto t = Tokenizer::from_json_text(text);
        ASSERT_FALSE(t.is_ok()) << "accepted: " << needle;
        EXPECT_NE(t.status().message().find(needle), std::string::npos) << t.status().message();
    };
    expect_error("{not json", "not valid JSON");
    expect_error("{}", "no \"model\"");
    expect_error(minimal_json("WordPiece"), "model type 'WordPiece' is not supported");
    expect_error(R"({"model": {"type": "BPE", "merges": []}})", "no \"vocab\"");
    expect_error(R"({"model": {"type": "BPE", "vocab": {}}})", "no \"merges\"");
    expect_error(R"({"model": {"type": "BPE", "vocab": {"a": "x"}, "merges": []}})", "no integer id");
    expect_error(R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": []}})", "byte token");
    std::string bad_norm = minimal_json();
    bad_norm.replace(bad_norm.find("\"NFC\""), 5, "\"NFKC\"");
    expect_error(bad_norm, "normalizer type 'NFKC'");
    std::string bad_merge = minimal_json();
    bad_merge.replace(bad_merge.find("[\"ab\", \"c\"]"), 11, "[\"zz\", \"q\"]");
    expect_error(bad_merge, "not in the vocab");
    std::string bad_added = minimal_json();
    bad_added.replace(bad_added.find("\"id\": 300"), 9, "\"id\": \"x\"");
    expect_error(bad_added, "added token");
    // Ids index dense tables: a huge id is an error naming it, not a multi-gigabyte allocation
    // (the tokenizer_json fuzzer found this one), and 64-bit ids do not wrap to small ones.
    expect_error(R"({"model": {"type": "BPE", "vocab": {"a": 99999999}, "merges": []}})",
                 "vocab entry 'a' has id 99999999, above the supported maximum 4194303");
    expect_error(R"({"model": {"type": "BPE", "vocab": {"a": 4294967296}, "merges": []}})",
                 "has id 4294967296");
    expect_error(R"({"model": {"type": "BPE", "vocab": {"a": -1}, "merges": []}})", "negative id");
    std::string huge_added = minimal_json();
    huge_added.replace(huge_added.find("\"id\": 300"), 9, "\"id\": 2147483647");
    expect_error(huge_added, "added token '<|end|>' has id 2147483647");
}

TEST(TokenizerLoad, MissingFileIsNotFound) {
    auto t = Tokenizer::from_file("/nonexistent/tokenizer.json");
    ASSERT_FALSE(t.is_ok());
    EXPECT_EQ(t.status().kind(), ErrorKind::kNotFound);
}

TEST(Regex, TranslatesWhitespaceAndCategories) {
    auto r = translate_regex(R"(\s+(?!\S)|[^\s\p{L}]+)");
    ASSERT_TRUE(r.is_ok());
    EXPECT_NE(r->find("\\x{85}"), std::string::npos);
    EXPECT_FALSE(translate_regex(R"([\S])").is_ok());
    EXPECT_FALSE(translate_regex(R"([abc)").is_ok());
}

TEST(Qwen3, KnownIdsAndSpecialTokens) {
    QS_REQUIRE_QWEN3();
    EXPECT_EQ(tok->encode("Hello world!"), (std::vector<int32_t>{9707, 1879, 0}));
    EXPECT_EQ(tok->token_to_id("<|im_start|>"), 151644);
    EXPECT_EQ(tok->token_to_id("<think>"), 151667);
    EXPECT_EQ(tok->id_to_token(151645), "<|im_end|>");
    EXPECT_EQ(tok->eos_token_id(), 151645);  // tokenizer_config.json: eos_token <|im_end|>
    EXPECT_EQ(tok->pad_token_id(), 151643);
    EXPECT_FALSE(tok->is_special(151667));    // <think> is an added, non-special token
    EXPECT_TRUE(tok->is_special(151644));
    EXPECT_FALSE(tok->chat_template().empty());
    EXPECT_EQ(tok->vocab_size(), 151669);
}

TEST(Qwen3, SpecialTokensInsideTextAndSkipping) {
    QS_REQUIRE_QWEN3();
    const auto ids = tok->encode("a<|im_start|>b<think>c</think>");
    EXPECT_EQ(ids[1], 151644);
    EXPECT_EQ(tok->decode(ids), "a<|im_start|>b<think>c</think>");
    EXPECT_EQ(tok->decode(ids, true), "ab<think>c</think>");  // <think> is not special
}

TEST(Qwen3, InvalidUtf8IsRepairedLikePython) {
    QS_REQUIRE_QWEN3();
    // "\xE4\xBD" is one maximal subpart (one U+FFFD), "\xFF" another.
    EXPECT_EQ(tok->encode("x\xE4\xBDy\xFF"), tok->encode("x\xEF\xBF\xBDy\xEF\xBF\xBD"));
    EXPECT_EQ(tok->decode(tok->encode("\xF0\x9F\x98")), "\xEF\xBF\xBD");
}

TEST(Qwen3, DecodeSkipsUnknownIds) {
    QS_REQUIRE_QWEN3();
    const std::vector<int32_t> ids = {9707, -1, 999999999, 1879};
    EXPECT_EQ(tok->decode(ids), "Hello world");
}

}  // namespace
}  // namespace qs::tok

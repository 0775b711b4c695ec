// UTF-8 repair and streaming helpers, and the regex character classes: PCRE2's \p{L}, \p{M},
// \p{N}, \p{Z} plus the committed fixes must equal Unicode 16.0 (Oniguruma's tables in HF
// tokenizers) for every code point, per tests/data/tokenizer/unicode16_classes.txt.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "tokenizer/pretokenizer.h"
#include "tokenizer/unicode.h"
#include "tokenizer_test_util.h"

namespace qs::tok {
namespace {

TEST(Utf8, RepairUsesMaximalSubparts) {
    EXPECT_EQ(utf8_repair("ok"), "ok");
    EXPECT_EQ(utf8_repair("\xE4\xBD" "a"), "\xEF\xBF\xBD" "a");            // one truncated char
    EXPECT_EQ(utf8_repair("\xC0\xAF"), "\xEF\xBF\xBD\xEF\xBF\xBD");        // overlong: 2 subparts
    EXPECT_EQ(utf8_repair("\xED\xA0\x80"), "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");  // surrogate
    EXPECT_EQ(utf8_repair("\xF0\x9F\x98"), "\xEF\xBF\xBD");
    EXPECT_EQ(utf8_repair("\xF4\x90\x80\x80").size(), 12u);  // > U+10FFFF: 4 subparts
}

TEST(Utf8, IncompleteTail) {
    EXPECT_EQ(utf8_incomplete_tail("abc"), 0u);
    EXPECT_EQ(utf8_incomplete_tail("a\xE4"), 1u);
    EXPECT_EQ(utf8_incomplete_tail("a\xE4\xBD"), 2u);
    EXPECT_EQ(utf8_incomplete_tail("a\xE4\xBD\xA0"), 0u);
    EXPECT_EQ(utf8_incomplete_tail("\xF0\x9F\x98"), 3u);
    EXPECT_EQ(utf8_incomplete_tail("\xFF"), 0u);
    EXPECT_EQ(utf8_incomplete_tail("\xE4\x41"), 0u);
}

TEST(Unicode, NfcKeepsHfUnicode9Behaviour) {
    EXPECT_EQ(nfc("e\xCC\x81"), "\xC3\xA9");  // e + U+0301 -> é
    // U+1AC0 (Unicode 14, ccc 220) is unknown to HF's tables: no reordering around it.
    const std::string s = "x\xE1\xAB\x80\xE0\xA4\xBC";  // x U+1AC0 U+093C
    EXPECT_EQ(nfc(s), s);
}

TEST(Unicode, RegexClassesMatchUnicode16) {
    std::ifstream in(testing::data_dir() + "/unicode16_classes.txt");
    ASSERT_TRUE(in) << "missing unicode16_classes.txt";
    std::string line;
    int classes = 0;
    while (std::getline(in, line)) {
        std::istringstream fields(line);
        std::string name, range;
        fields >> name;
        std::vector<uint8_t> member(0x110000, 0);
        while (fields >> range) {
            const size_t dash = range.find('-');
            const uint32_t a = std::stoul(range.substr(0, dash), nullptr, 16);
            const uint32_t b = std::stoul(range.substr(dash + 1), nullptr, 16);
            for (uint32_t cp = a; cp <= b; ++cp) member[cp] = 1;
        }
        auto splitter = RegexSplitter::create("\\p{" + name + "}");
        ASSERT_TRUE(splitter.is_ok());
        // Split a string of every code point: a one-character piece is a match only if it
        // is a member; members are exactly the characters that come out as matches.
        size_t mismatches = 0;
        std::vector<std::string_view> pieces;
        for (uint32_t cp = 0; cp < 0x110000; ++cp) {
            if (cp >= 0xD800 && cp <= 0xDFFF) continue;
            std::string ch;
            utf8_append(ch, cp);
            const std::string text = "\x01" + ch;  // \x01 is in no class
            pieces.clear();
            (*splitter)->split(text, pieces);
            const bool matched = pieces.size() == 2;
            if (matched != (member[cp] != 0) && ++mismatches <= 5)
                ADD_FAILURE() << "\\p{" << name << "} U+" << std::hex << cp;
        }
        EXPECT_EQ(mismatches, 0u) << name;
        ++classes;
    }
    EXPECT_EQ(classes, 4);
}

}  // namespace
}  // namespace qs::tok

// UTF-8 and Unicode helpers for the tokenizer: decoding code points, repairing invalid UTF-8 the
// way Python's `errors="replace"` and Rust's `from_utf8_lossy` do (one U+FFFD per maximal
// invalid subpart), NFC normalisation (utf8proc) and the GPT-2 byte-level byte<->char map.
// Pure functions and immutable tables; safe from any thread.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

namespace qs::tok {

// Length in bytes of the valid UTF-8 sequence starting at s[pos], or 0 if the bytes there do
// not start a valid, complete sequence (overlong forms, surrogates and > U+10FFFF are invalid).
size_t utf8_valid_length(std::string_view s, size_t pos);

// Decodes the valid sequence of `len` bytes at s[pos] (as returned by utf8_valid_length).
uint32_t utf8_decode_at(std::string_view s, size_t pos, size_t len);

void utf8_append(std::string& out, uint32_t cp);

bool is_valid_utf8(std::string_view s);

// Replaces each maximal invalid subpart (Unicode §3.9 "U+FFFD substitution of maximal subparts",
// the policy of Python and Rust) by U+FFFD. Valid input comes back unchanged.
std::string utf8_repair(std::string_view s);

// Number of bytes at the end of `s` that form an incomplete (but so far valid) UTF-8 prefix,
// i.e. bytes that may still become a character when more bytes arrive. 0..3.
size_t utf8_incomplete_tail(std::string_view s);

// NFC normalisation of valid UTF-8. Fast path: text whose every character is NFC-stable on its
// own (ASCII, Latin-1, most CJK, Hangul syllables) is returned as is.
std::string nfc(std::string_view s);

// The GPT-2 ByteLevel alphabet: each byte maps to one printable code point.
struct ByteLevelMap {
    std::array<uint32_t, 256> byte_to_cp{};
    // Inverse for code points < 324 (all of the alphabet); -1 where a code point is not in it.
    std::array<int16_t, 324> cp_to_byte{};
};
const ByteLevelMap& byte_level_map();

// Converts a token written in the ByteLevel alphabet back to raw bytes; false if a character of
// `token` is not in the alphabet.
bool byte_level_to_bytes(std::string_view token, std::string& out);
std::string bytes_to_byte_level(std::string_view bytes);

}  // namespace qs::tok

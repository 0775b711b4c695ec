// UTF-8 decoding and repair, NFC, and the ByteLevel alphabet (see unicode.h).
#include "tokenizer/unicode.h"

#include <algorithm>
#include <cstdlib>
#include <utf8proc.h>

namespace qs::tok {

namespace {

// For a lead byte: the sequence length and the allowed range of the second byte (Unicode
// Table 3-7, "well-formed UTF-8 byte sequences"). len 0 = not a lead byte.
struct LeadInfo {
    uint8_t len;
    uint8_t lo;
    uint8_t hi;
};

LeadInfo lead_info(uint8_t b) {
    if (b < 0x80) return {1, 0, 0};
    if (b >= 0xC2 && b <= 0xDF) return {2, 0x80, 0xBF};
    if (b == 0xE0) return {3, 0xA0, 0xBF};
    if (b == 0xED) return {3, 0x80, 0x9F};
    if (b >= 0xE1 && b <= 0xEF) return {3, 0x80, 0xBF};
    if (b == 0xF0) return {4, 0x90, 0xBF};
    if (b >= 0xF1 && b <= 0xF3) return {4, 0x80, 0xBF};
    if (b == 0xF4) return {4, 0x80, 0x8F};
    return {0, 0, 0};
}

// Number of bytes from pos that are a valid (possibly incomplete) prefix of a sequence, and
// the full length that sequence needs (0 if s[pos] is no lead byte).
void valid_prefix(std::string_view s, size_t pos, size_t& have, size_t& need) {
    const LeadInfo info = lead_info(static_cast<uint8_t>(s[pos]));
    need = info.len;
    have = need == 0 ? 0 : 1;
    if (need <= 1) return;
    for (size_t i = 1; i < need && pos + i < s.size(); ++i) {
        const uint8_t c = static_cast<uint8_t>(s[pos + i]);
        const uint8_t lo = i == 1 ? info.lo : 0x80;
        const uint8_t hi = i == 1 ? info.hi : 0xBF;
        if (c < lo || c > hi) return;
        ++have;
    }
}

bool nfc_stable(uint32_t cp) {
    // Characters with NFC_Quick_Check=Yes and canonical combining class 0 in these ranges: such
    // text is already NFC and nothing in it can compose.
    return cp < 0x300 || (cp >= 0x3400 && cp <= 0x4DBF) || (cp >= 0x4E00 && cp <= 0x9FFF) ||
           (cp >= 0xAC00 && cp <= 0xD7A3) || (cp >= 0x3000 && cp <= 0x3029) ||
           (cp >= 0x3041 && cp <= 0x3096) || (cp >= 0x30A1 && cp <= 0x30FA) ||
           (cp >= 0xFF01 && cp <= 0xFF60);
}

// Characters HF tokenizers' NFC (Unicode 9.0 tables) leaves alone but utf8proc would reorder,
// decompose or compose (see tools/nfc_gap_table.py).
constexpr uint32_t kNfcGaps[] = {
#include "tokenizer/nfc_gaps.inc"
};

bool is_nfc_gap(uint32_t cp) {
    return std::binary_search(std::begin(kNfcGaps), std::end(kNfcGaps), cp);
}

std::string utf8proc_nfc(std::string_view s) {
    if (s.empty()) return {};
    utf8proc_uint8_t* out = nullptr;
    const utf8proc_ssize_t n =
        utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(s.data()),
                     static_cast<utf8proc_ssize_t>(s.size()), &out,
                     static_cast<utf8proc_option_t>(UTF8PROC_STABLE | UTF8PROC_COMPOSE));
    if (n < 0) return std::string(s);  // only on invalid input, which callers repair first
    std::string result(reinterpret_cast<char*>(out), static_cast<size_t>(n));
    std::free(out);
    return result;
}

}  // namespace

size_t utf8_valid_length(std::string_view s, size_t pos) {
    size_t have = 0, need = 0;
    valid_prefix(s, pos, have, need);
    return (need != 0 && have == need) ? need : 0;
}

uint32_t utf8_decode_at(std::string_view s, size_t pos, size_t len) {
    const auto* p = reinterpret_cast<const uint8_t*>(s.data() + pos);
    switch (len) {
        case 1: return p[0];
        case 2: return ((p[0] & 0x1Fu) << 6) | (p[1] & 0x3Fu);
        case 3: return ((p[0] & 0x0Fu) << 12) | ((p[1] & 0x3Fu) << 6) | (p[2] & 0x3Fu);
        default:
            return ((p[0] & 0x07u) << 18) | ((p[1] & 0x3Fu) << 12) | ((p[2] & 0x3Fu) << 6) |
                   (p[3] & 0x3Fu);
    }
}

void utf8_append(std::string& out, uint32_t cp) {
    if (cp < 0x80) {
        out.push_back(static_cast<char>(cp));
    } else if (cp < 0x800) {
        out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
        out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    } else if (cp < 0x10000) {
        out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
        out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
        out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    } else {
        out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
        out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
        out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
        out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    }
}

bool is_valid_utf8(std::string_view s) {
    for (size_t i = 0; i < s.size();) {
        if (static_cast<uint8_t>(s[i]) < 0x80) { ++i; continue; }
        const size_t len = utf8_valid_length(s, i);
        if (len == 0) return false;
        i += len;
    }
    return true;
}

std::string utf8_repair(std::string_view s) {
    if (is_valid_utf8(s)) return std::string(s);
    std::string out;
    out.reserve(s.size() + 8);
    for (size_t i = 0; i < s.size();) {
        size_t have = 0, need = 0;
        valid_prefix(s, i, have, need);
        if (need != 0 && have == need) {
            out.append(s.substr(i, need));
            i += need;
        } else {
            out.append("\xEF\xBF\xBD");
            i += have == 0 ? 1 : have;
        }
    }
    return out;
}

size_t utf8_incomplete_tail(std::string_view s) {
    for (size_t k = 1; k <= 3 && k <= s.size(); ++k) {
        const size_t pos = s.size() - k;
        const uint8_t b = static_cast<uint8_t>(s[pos]);
        if ((b & 0xC0) == 0x80) continue;  // a continuation byte: the lead is further back
        size_t have = 0, need = 0;
        valid_prefix(s, pos, have, need);
        return (need > k && have == k) ? k : 0;
    }
    return 0;
}

std::string nfc(std::string_view s) {
    bool stable = true;
    bool has_gap = false;
    for (size_t i = 0; i < s.size();) {
        const uint8_t b = static_cast<uint8_t>(s[i]);
        if (b < 0x80) { ++i; continue; }
        const size_t len = utf8_valid_length(s, i);
        if (len == 0) return std::string(s);  // callers repair UTF-8 first
        const uint32_t cp = utf8_decode_at(s, i, len);
        if (!nfc_stable(cp)) {
            stable = false;
            if (is_nfc_gap(cp)) has_gap = true;
        }
        i += len;
    }
    if (stable) return std::string(s);
    if (!has_gap) return utf8proc_nfc(s);
    // A gap character acts as an unassigned starter: it blocks reordering and composition
    // across it, so the text on each side is normalised on its own.
    std::string out;
    size_t start = 0;
    for (size_t i = 0; i < s.size();) {
        const size_t len = static_cast<uint8_t>(s[i]) < 0x80 ? 1 : utf8_valid_length(s, i);
        if (len > 1 && is_nfc_gap(utf8_decode_at(s, i, len))) {
            out += utf8proc_nfc(s.substr(start, i - start));
            out.append(s.substr(i, len));
            start = i + len;
        }
        i += len;
    }
    out += utf8proc_nfc(s.substr(start));
    return out;
}

const ByteLevelMap& byte_level_map() {
    static const ByteLevelMap map = [] {
        ByteLevelMap m;
        m.cp_to_byte.fill(-1);
        // Printable bytes map to themselves; the rest to 256, 257, ... in byte order (GPT-2).
        auto printable = [](int b) {
            return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
        };
        uint32_t next = 256;
        for (int b = 0; b < 256; ++b) {
            m.byte_to_cp[b] = printable(b) ? static_cast<uint32_t>(b) : next++;
            m.cp_to_byte[m.byte_to_cp[b]] = static_cast<int16_t>(b);
        }
        return m;
    }();
    return map;
}

bool byte_level_to_bytes(std::string_view token, std::string& out) {
    const ByteLevelMap& map = byte_level_map();
    const size_t start = out.size();
    for (size_t i = 0; i < token.size();) {
        const size_t len = utf8_valid_length(token, i);
        const uint32_t cp = len == 0 ? 0xFFFFFFFF : utf8_decode_at(token, i, len);
        if (cp >= map.cp_to_byte.size() || map.cp_to_byte[cp] < 0) {
            out.resize(start);
            return false;
        }
        out.push_back(static_cast<char>(map.cp_to_byte[cp]));
        i += len;
    }
    return true;
}

std::string bytes_to_byte_level(std::string_view bytes) {
    const ByteLevelMap& map = byte_level_map();
    std::string out;
    out.reserve(bytes.size() * 2);
    for (unsigned char b : bytes) utf8_append(out, map.byte_to_cp[b]);
    return out;
}

}  // namespace qs::tok

// Python string operations (see text.h).
#include "jinja/text.h"

#include <utf8proc.h>

#include "tokenizer/python_format.h"
#include "tokenizer/unicode.h"

namespace qs::jinja {

namespace {

struct Cp {
    uint32_t cp;
    std::string bytes;
};

std::vector<Cp> decode(const std::string& s) {
    std::vector<Cp> out;
    for (size_t i = 0; i < s.size();) {
        const size_t len = tok::utf8_valid_length(s, i);
        if (len == 0) {
            out.push_back({0xFFFFFFFFu, s.substr(i, 1)});
            ++i;
        } else {
            out.push_back({tok::utf8_decode_at(s, i, len), s.substr(i, len)});
            i += len;
        }
    }
    return out;
}

bool is_cased(uint32_t cp) {
    if (cp == 0xFFFFFFFFu) return false;
    return utf8proc_tolower(int32_t(cp)) != int32_t(cp) || utf8proc_toupper(int32_t(cp)) != int32_t(cp) ||
           utf8proc_totitle(int32_t(cp)) != int32_t(cp);
}

// Python's full upper-case mappings that are not one code point (SpecialCasing.txt's
// unconditional entries for the Latin ligatures and sharp s); title case capitalises them.
const char* special_upper(uint32_t cp, bool title) {
    switch (cp) {
        case 0x00DF: return title ? "Ss" : "SS";
        case 0xFB00: return title ? "Ff" : "FF";
        case 0xFB01: return title ? "Fi" : "FI";
        case 0xFB02: return title ? "Fl" : "FL";
        case 0xFB03: return title ? "Ffi" : "FFI";
        case 0xFB04: return title ? "Ffl" : "FFL";
        case 0xFB05:
        case 0xFB06: return title ? "St" : "ST";
        case 0x0149: return "\u02BCN";
        default: return nullptr;
    }
}

// Σ lower-cases to final ς after a cased letter when no cased letter follows (Python's rule,
// case-ignorable characters not skipped).
uint32_t lower_at(const std::vector<Cp>& cps, size_t i) {
    if (cps[i].cp == 0x03A3 && i > 0 && is_cased(cps[i - 1].cp) && (i + 1 == cps.size() || !is_cased(cps[i + 1].cp)))
        return 0x03C2;
    return uint32_t(utf8proc_tolower(int32_t(cps[i].cp)));
}

void append_upper(uint32_t cp, bool title, std::string& out) {
    if (const char* special = special_upper(cp, title)) {
        out += special;
        return;
    }
    tok::utf8_append(out, uint32_t(title ? utf8proc_totitle(int32_t(cp)) : utf8proc_toupper(int32_t(cp))));
}

std::string map_case(const std::string& s, bool upper) {
    std::string out;
    const auto cps = decode(s);
    for (size_t i = 0; i < cps.size(); ++i) {
        if (cps[i].cp == 0xFFFFFFFFu) out += cps[i].bytes;
        else if (upper) append_upper(cps[i].cp, false, out);
        else tok::utf8_append(out, lower_at(cps, i));
    }
    return out;
}

bool is_space(uint32_t cp) { return cp != 0xFFFFFFFFu && tok::python_isspace(cp); }

}  // namespace

std::vector<std::string> code_point_strings(const std::string& s) {
    std::vector<std::string> out;
    for (Cp& c : decode(s)) out.push_back(std::move(c.bytes));
    return out;
}

std::string py_lower(const std::string& s) { return map_case(s, false); }
std::string py_upper(const std::string& s) { return map_case(s, true); }

std::string py_title(const std::string& s) {
    std::string out;
    bool prev_cased = false;
    const auto cps = decode(s);
    for (size_t i = 0; i < cps.size(); ++i) {
        const bool cased = is_cased(cps[i].cp);
        if (!cased) out += cps[i].bytes;
        else if (prev_cased) tok::utf8_append(out, lower_at(cps, i));
        else append_upper(cps[i].cp, true, out);
        prev_cased = cased;
    }
    return out;
}

std::string py_capitalize(const std::string& s, bool first_upper) {
    const auto cps = decode(s);
    std::string out;
    for (size_t i = 0; i < cps.size(); ++i) {
        if (cps[i].cp == 0xFFFFFFFFu) out += cps[i].bytes;
        else if (i == 0) append_upper(cps[i].cp, !first_upper, out);
        else tok::utf8_append(out, lower_at(cps, i));
    }
    return out;
}

std::vector<std::string> py_split(const std::string& s, const std::string* sep, int64_t maxsplit) {
    std::vector<std::string> out;
    if (sep) {
        size_t start = 0;
        while (maxsplit < 0 || int64_t(out.size()) < maxsplit) {
            const size_t at = s.find(*sep, start);
            if (at == std::string::npos) break;
            out.push_back(s.substr(start, at - start));
            start = at + sep->size();
        }
        out.push_back(s.substr(start));
        return out;
    }
    const auto cps = decode(s);
    size_t i = 0;
    while (i < cps.size()) {
        while (i < cps.size() && is_space(cps[i].cp)) ++i;
        if (i == cps.size()) break;
        std::string word;
        if (maxsplit >= 0 && int64_t(out.size()) == maxsplit) {
            // The remainder as it is (its trailing whitespace kept, as CPython does).
            for (size_t j = i; j < cps.size(); ++j) word += cps[j].bytes;
            out.push_back(std::move(word));
            return out;
        }
        while (i < cps.size() && !is_space(cps[i].cp)) word += cps[i++].bytes;
        out.push_back(std::move(word));
    }
    return out;
}

std::vector<std::string> py_rsplit(const std::string& s, const std::string* sep, int64_t maxsplit) {
    if (maxsplit < 0) return py_split(s, sep, maxsplit);
    if (!sep) {
        // Whitespace runs from the right: split the reversed string, reverse back.
        auto cps = code_point_strings(s);
        std::string reversed;
        for (auto it = cps.rbegin(); it != cps.rend(); ++it) reversed += *it;
        std::vector<std::string> parts = py_split(reversed, nullptr, maxsplit);
        std::vector<std::string> out;
        for (auto it = parts.rbegin(); it != parts.rend(); ++it) {
            auto pc = code_point_strings(*it);
            std::string back;
            for (auto jt = pc.rbegin(); jt != pc.rend(); ++jt) back += *jt;
            out.push_back(std::move(back));
        }
        return out;
    }
    std::vector<std::string> rev;
    size_t end = s.size();
    while (int64_t(rev.size()) < maxsplit) {
        if (end < sep->size()) break;
        const size_t at = s.rfind(*sep, end - sep->size());
        if (at == std::string::npos) break;
        rev.push_back(s.substr(at + sep->size(), end - at - sep->size()));
        end = at;
    }
    rev.push_back(s.substr(0, end));
    return std::vector<std::string>(rev.rbegin(), rev.rend());
}

std::vector<std::string> py_splitlines(const std::string& s) {
    std::vector<std::string> out;
    std::string line;
    const auto cps = decode(s);
    for (size_t i = 0; i < cps.size(); ++i) {
        const uint32_t c = cps[i].cp;
        const bool brk = c == '\n' || c == '\r' || c == 0x0B || c == 0x0C || c == 0x1C || c == 0x1D || c == 0x1E ||
                         c == 0x85 || c == 0x2028 || c == 0x2029;
        if (!brk) {
            line += cps[i].bytes;
            continue;
        }
        if (c == '\r' && i + 1 < cps.size() && cps[i + 1].cp == '\n') ++i;
        out.push_back(std::move(line));
        line.clear();
    }
    if (!line.empty()) out.push_back(std::move(line));
    return out;
}

std::string py_replace(const std::string& s, const std::string& from, const std::string& to, int64_t count) {
    std::string out;
    if (from.empty()) {
        // Python inserts `to` between every character (and at both ends).
        const auto cps = code_point_strings(s);
        int64_t done = 0;
        for (const std::string& c : cps) {
            if (count < 0 || done < count) {
                out += to;
                ++done;
            }
            out += c;
        }
        if (count < 0 || done < count) out += to;
        return out;
    }
    size_t start = 0;
    int64_t done = 0;
    while (count < 0 || done < count) {
        const size_t at = s.find(from, start);
        if (at == std::string::npos) break;
        out.append(s, start, at - start);
        out += to;
        start = at + from.size();
        ++done;
    }
    out.append(s, start, std::string::npos);
    return out;
}

}  // namespace qs::jinja

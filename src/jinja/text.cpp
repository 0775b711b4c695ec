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

std::string map_case(const std::string& s, bool upper) {
    std::string out;
    for (const Cp& c : decode(s)) {
        if (c.cp == 0xFFFFFFFFu) {
            out += c.bytes;
            continue;
        }
        const auto m = upper ? utf8proc_toupper(int32_t(c.cp)) : utf8proc_tolower(int32_t(c.cp));
        tok::utf8_append(out, uint32_t(m));
    }
    return out;
}

bool is_cased(uint32_t cp) {
    if (cp == 0xFFFFFFFFu) return false;
    return utf8proc_tolower(int32_t(cp)) != int32_t(cp) || utf8proc_toupper(int32_t(cp)) != int32_t(cp);
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
    for (const Cp& c : decode(s)) {
        const bool cased = is_cased(c.cp);
        if (cased) tok::utf8_append(out, uint32_t(prev_cased ? utf8proc_tolower(int32_t(c.cp))
                                                             : utf8proc_totitle(int32_t(c.cp))));
        else out += c.bytes;
        prev_cased = cased;
    }
    return out;
}

std::string py_capitalize(const std::string& s) {
    const auto cps = decode(s);
    std::string out;
    for (size_t i = 0; i < cps.size(); ++i) {
        if (cps[i].cp == 0xFFFFFFFFu) out += cps[i].bytes;
        else tok::utf8_append(out, uint32_t(i == 0 ? utf8proc_totitle(int32_t(cps[i].cp))
                                                   : utf8proc_tolower(int32_t(cps[i].cp))));
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
            // The remainder as it is, its trailing whitespace dropped.
            size_t e = cps.size();
            while (e > i && is_space(cps[e - 1].cp)) --e;
            for (size_t j = i; j < e; ++j) word += cps[j].bytes;
            out.push_back(std::move(word));
            return out;
        }
        while (i < cps.size() && !is_space(cps[i].cp)) word += cps[i++].bytes;
        out.push_back(std::move(word));
    }
    return out;
}

std::vector<std::string> py_rsplit(const std::string& s, const std::string* sep, int64_t maxsplit) {
    if (!sep || maxsplit < 0) return py_split(s, sep, maxsplit);
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

// repetitions_as_automata (see repetition_automaton.h).
#include "grammar/repetition_automaton.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <map>
#include <sstream>
#include <unordered_map>
#include <utility>
#include <vector>

#include "grammar/ebnf_text.h"

namespace qs::grammar {

namespace {

constexpr int64_t kMaxCodepoint = 0x10FFFF;

int hex_value(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

// The index just past the "..." literal or [...] class that starts at s[i]; npos if unterminated.
size_t skip_quoted(const std::string& s, size_t i) {
    const char close = s[i] == '"' ? '"' : ']';
    for (++i; i < s.size(); ++i) {
        if (s[i] == '\\') {
            ++i;
        } else if (s[i] == close) {
            return i + 1;
        }
    }
    return std::string::npos;
}

// One code point of a printed class at s[i] (advancing i); -1 when not understood.
int64_t class_codepoint(const std::string& s, size_t& i) {
    if (i >= s.size()) return -1;
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c != '\\') {
        if (c < 0x80) {
            ++i;
            return c;
        }
        const int n = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 0;
        if (n == 0 || i + size_t(n) > s.size()) return -1;
        int64_t cp = c & (0x3F >> (n - 1));
        for (int k = 1; k < n; ++k) cp = (cp << 6) | (static_cast<unsigned char>(s[i + size_t(k)]) & 0x3F);
        i += size_t(n);
        return cp;
    }
    if (++i >= s.size()) return -1;
    const char e = s[i++];
    switch (e) {
        case 'n': return '\n';
        case 'r': return '\r';
        case 't': return '\t';
        case '0': return 0;
        case '\\':
        case '"':
        case ']':
        case '[':
        case '-':
        case '^': return e;
        case 'x':
        case 'u':
        case 'U': {
            const int n = e == 'x' ? 2 : e == 'u' ? 4 : 8;
            int64_t v = 0;
            for (int k = 0; k < n; ++k) {
                if (i >= s.size() || hex_value(s[i]) < 0) return -1;
                v = v * 16 + hex_value(s[i++]);
            }
            return v <= kMaxCodepoint ? v : -1;
        }
        default: return -1;  // \b \f ... : printed so? Not seen; leave the grammar alone.
    }
}

bool name_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }

bool read_count(const std::string& s, size_t& i, int64_t& v) {
    size_t j = i;
    const bool negative = j < s.size() && s[j] == '-';
    if (negative) ++j;
    if (j >= s.size() || !std::isdigit(static_cast<unsigned char>(s[j]))) return false;
    int64_t x = 0;
    for (; j < s.size() && std::isdigit(static_cast<unsigned char>(s[j])); ++j) {
        x = x * 10 + (s[j] - '0');
        if (x > 1'000'000'000) return false;
    }
    v = negative ? -x : x;
    i = j;
    return true;
}

void skip_spaces(const std::string& s, size_t& i) {
    while (i < s.size() && s[i] == ' ') ++i;
}

// "{m, n}" at s[i] (xgrammar prints "{0, 16}"); advances i past it.
bool read_bounds(const std::string& s, size_t& i, int64_t& lo, int64_t& hi) {
    size_t k = i;
    if (k >= s.size() || s[k] != '{') return false;
    ++k;
    skip_spaces(s, k);
    if (!read_count(s, k, lo)) return false;
    skip_spaces(s, k);
    if (k >= s.size() || s[k] != ',') return false;
    ++k;
    skip_spaces(s, k);
    if (!read_count(s, k, hi)) return false;
    skip_spaces(s, k);
    if (k >= s.size() || s[k] != '}') return false;
    i = k + 1;
    return true;
}

}  // namespace

std::string char_class_as_regex(const std::string& cls) {
    if (cls.size() < 2 || cls.front() != '[' || cls.back() != ']') return "";
    const size_t end = cls.size() - 1;
    size_t i = 1;
    const bool negated = i < end && cls[i] == '^';
    if (negated) ++i;
    std::vector<std::pair<int64_t, int64_t>> ranges;
    while (i < end) {
        const int64_t a = class_codepoint(cls, i);
        if (a < 0) return "";
        int64_t b = a;
        if (i + 1 < end && cls[i] == '-') {
            ++i;
            b = class_codepoint(cls, i);
            if (b < a) return "";
        }
        ranges.emplace_back(a, b);
    }
    if (i != end) return "";
    std::sort(ranges.begin(), ranges.end());
    std::vector<std::pair<int64_t, int64_t>> allowed;
    if (negated) {
        int64_t next = 0;
        for (const auto& [a, b] : ranges) {
            if (a > next) allowed.emplace_back(next, a - 1);
            next = std::max(next, b + 1);
        }
        if (next <= kMaxCodepoint) allowed.emplace_back(next, kMaxCodepoint);
    } else {
        allowed = ranges;
    }
    // One class per UTF-8 width, as xgrammar's grammar builder encodes a class.
    constexpr int64_t kWidths[4][2] = {{0, 0x7F}, {0x80, 0x7FF}, {0x800, 0xFFFF}, {0x10000, kMaxCodepoint}};
    std::string out;
    for (const auto& w : kWidths) {
        std::string c;
        for (const auto& [a, b] : allowed) {
            const int64_t lo = std::max(a, w[0]), hi = std::min(b, w[1]);
            if (lo > hi) continue;
            c += fmt::format("\\u{{{:x}}}", lo);
            if (hi > lo) c += fmt::format("-\\u{{{:x}}}", hi);
        }
        if (!c.empty()) out += (out.empty() ? "[" : "|[") + c + "]";
    }
    return out.empty() ? "" : "(?:" + out + ")";
}

std::optional<std::string> repetitions_as_automata(const std::string& ebnf) {
    std::vector<std::string> lines;
    {
        std::stringstream in(ebnf);
        for (std::string line; std::getline(in, line);) lines.push_back(line);
    }
    constexpr const char* kAssign = " ::= ";
    // Rules whose whole body is one character class: name → the class as a regex.
    std::unordered_map<std::string, std::string> class_rules;
    for (const std::string& line : lines) {
        const size_t at = line.find(kAssign);
        if (at == std::string::npos) continue;
        const std::string body = line.substr(at + 5);
        if (body.rfind("(([", 0) != 0) continue;
        const size_t end = skip_quoted(body, 2);
        if (end == std::string::npos || body.compare(end, std::string::npos, "))") != 0) continue;
        const std::string regex = char_class_as_regex(body.substr(2, end - 2));
        if (!regex.empty()) class_rules.emplace(line.substr(0, at), regex);
    }
    if (class_rules.empty()) return std::nullopt;
    std::map<std::string, std::string> new_rules;  // "regex{m,n}" → rule name
    std::string out;
    for (const std::string& line : lines) {
        const size_t at = line.find(kAssign);
        if (at == std::string::npos) {
            out += line + "\n";
            continue;
        }
        std::string rewritten = line.substr(0, at + 5);
        size_t i = at + 5;
        while (i < line.size()) {
            const char c = line[i];
            if (c == '"' || c == '[') {
                const size_t e = skip_quoted(line, i);
                if (e == std::string::npos) return std::nullopt;
                rewritten.append(line, i, e - i);
                i = e;
                continue;
            }
            if (!name_char(c)) {
                rewritten += c;
                ++i;
                continue;
            }
            size_t j = i;
            while (j < line.size() && name_char(line[j])) ++j;
            const auto rule = class_rules.find(line.substr(i, j - i));
            size_t k = j;
            int64_t lo = 0, hi = 0;
            if (rule != class_rules.end() && read_bounds(line, k, lo, hi) && lo >= 0 && hi >= lo &&
                hi <= kMaxRepetitionAutomaton) {
                const std::string key = fmt::format("{}{{{},{}}}", rule->second, lo, hi);
                auto [it, added] = new_rules.emplace(key, fmt::format("qs_repeat_{}", new_rules.size()));
                (void)added;
                rewritten += it->second;
                i = k;
                continue;
            }
            rewritten.append(line, i, j - i);
            i = j;
        }
        out += rewritten + "\n";
    }
    if (new_rules.empty()) return std::nullopt;
    for (const auto& [regex, name] : new_rules) out += fmt::format("{} ::= Regex({})\n", name, ebnf_literal(regex));
    return out;
}

}  // namespace qs::grammar

// Writing xgrammar EBNF text: a string as an EBNF literal.
#pragma once

#include <fmt/format.h>

#include <string>

namespace qs::grammar {

// A string as an EBNF literal: quotes and backslashes escaped, control characters as \uXXXX
// (fixed width: a following hex digit cannot be read into it), other bytes as they are.
inline std::string ebnf_literal(const std::string& s) {
    std::string out = "\"";
    for (unsigned char c : s) {
        if (c == '"' || c == '\\') {
            out += '\\';
            out += char(c);
        } else if (c < 0x20 || c == 0x7f) {
            out += fmt::format("\\u{:04x}", unsigned(c));
        } else {
            out += char(c);
        }
    }
    return out + "\"";
}

}  // namespace qs::grammar

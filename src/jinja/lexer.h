// Jinja lexer: template source -> tokens (text runs, tag delimiters and the expression tokens
// inside tags), with jinja2's whitespace rules applied as transformers configures the
// environment: newlines normalised to "\n", one trailing newline dropped
// (keep_trailing_newline=False), `{%-`/`-%}` (and `{{-`, `{#-`, ...) strip whitespace,
// trim_blocks drops the first newline after a block or comment tag, lstrip_blocks drops the
// spaces and tabs before a block or comment tag that starts its line. Pure; any thread.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace qs::jinja {

enum class TokenType { kText, kVarBegin, kVarEnd, kBlockBegin, kBlockEnd, kName, kString, kInt, kFloat, kOp, kEof };

struct Token {
    TokenType type;
    std::string text;  // kText: the text; kName/kOp: the spelling; kString: the decoded value
    int64_t int_value = 0;
    double float_value = 0;
    int line = 1;
};

struct LexOptions {
    bool trim_blocks = true;
    bool lstrip_blocks = true;
};

// Throws TemplateError (with the line) on an unclosed tag, comment or string, or a character
// that starts no token.
std::vector<Token> tokenize(const std::string& source, const LexOptions& options);

}  // namespace qs::jinja

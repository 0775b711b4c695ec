// Jinja parser: tokens -> statement tree. Statements: if/elif/else, for (with else, a filter
// condition and tuple targets), set (names, tuples, namespace attributes, block set), macro,
// break/continue (loopcontrols), filter blocks, raw, and HF's {% generation %}. Expressions
// follow jinja2's grammar and precedence (conditional, or, and, not, comparisons and `in`,
// + -, ~, * / // %, **, unary, postfix . [] () and | filters, `is` tests). Anything else (call
// blocks, include, extends, import, with, ...) is an error naming the construct and its line.
#pragma once

#include <vector>

#include "jinja/ast.h"
#include "jinja/lexer.h"

namespace qs::jinja {

// Throws TemplateError.
Body parse(const std::vector<Token>& tokens);

}  // namespace qs::jinja

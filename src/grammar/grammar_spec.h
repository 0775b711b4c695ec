// A constraint as a request asks for it (structured outputs), before compilation: a JSON
// schema, any JSON object, a regular expression, a list of choices, an EBNF or Lark grammar,
// or an xgrammar structural tag (the tool-call grammars). Plain data; any thread.
#pragma once

#include <string>
#include <vector>

namespace qs::grammar {

struct GrammarSpec {
    enum class Kind { kJsonSchema, kJsonObject, kRegex, kChoice, kGrammar, kStructuralTag };
    Kind kind = Kind::kJsonObject;
    std::string text;                  // the schema (JSON text), regex, grammar or structural tag JSON
    std::vector<std::string> choices;  // kChoice: the output is exactly one of these
    bool any_whitespace = true;        // JSON: any whitespace between tokens (else compact)
};

const char* grammar_kind_name(GrammarSpec::Kind kind);

// JSON (schemas, json_object, tool-call arguments) allows at most this many whitespace
// characters in a row between tokens: enough to pretty-print a few levels deep, and a model that
// prefers whitespace cannot fill max_tokens with it (an unbounded run is a known failure of
// small models under JSON grammars).
inline constexpr int kMaxJsonWhitespace = 16;

}  // namespace qs::grammar

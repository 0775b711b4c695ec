// JSON-schema grammars with their bounded character repetitions as automata. xgrammar's JSON
// converter writes a `maxLength` string body as `chars{1,40}` and, with a whitespace bound, every
// whitespace slot as `[ \n\r\t]{0,16}`, over a rule of one character class; its compiler unrolls
// each into a chain of right-nested rules (`r_k ::= "" | c r_k+1`). A state inside such a chain is
// not its parent rule's, so most of the vocabulary is "uncertain" and re-checked by the Earley
// parser at every mask: 0.1–0.2 s for one row near a string's bound, 100–160 µs in whitespace
// (docs/PERF.md "JSON-schema masks"). Rewritten as one Regex("(?:A|B|C|D){m,n}") rule, the
// repetition is one automaton whose masks xgrammar precomputes. Same bytes accepted: the class is
// split into one class per UTF-8 width (1, 2, 3, 4 bytes), exactly as xgrammar's grammar builder
// encodes a character class (AddCodepointRange), because its regex builder would otherwise encode
// a range crossing widths with overlong byte sequences. Pure text → text, no xgrammar.
#pragma once

#include <optional>
#include <string>

namespace qs::grammar {

// The repetitions above this count are left to xgrammar (its regex builder turns them into
// counted edges again, and each unrolled state adds a precomputed mask to the compile).
inline constexpr int kMaxRepetitionAutomaton = 128;

// `ebnf`: a grammar as xgrammar's Grammar::ToString() prints it (one rule a line). Every
// `NAME{m, n}` with NAME a rule whose body is one character class and 0 <= m <= n <=
// kMaxRepetitionAutomaton becomes a reference to a new rule `qs_repeat_K ::= Regex(...)` (one per
// distinct class and bounds). nullopt when nothing was rewritten, or on text it does not
// understand (then the caller keeps xgrammar's own grammar).
std::optional<std::string> repetitions_as_automata(const std::string& ebnf);

// The printed character class `cls` ("[...]" or "[^...]") as a regex of one class per UTF-8
// width, e.g. "[^\"]" → "(?:[\u{0}-\u{21}\u{23}-\u{7f}]|[\u{80}-\u{7ff}]|...)"; "" when the
// class uses an escape it does not know. Exposed for tests.
std::string char_class_as_regex(const std::string& cls);

}  // namespace qs::grammar

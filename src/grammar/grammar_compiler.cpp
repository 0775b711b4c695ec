// GrammarCompiler over xgrammar (see grammar_compiler.h). Worker threads; one compile at a
// time (xgrammar parallelises a compile itself).
#include "grammar/grammar_compiler.h"

#include <fmt/format.h>

#include <cctype>
#include <mutex>
#include <unordered_map>

#include "grammar/ebnf_text.h"
#include "grammar/repetition_automaton.h"
#include "grammar/schema_check.h"
#include "grammar/xgrammar_bridge.h"

namespace qs::grammar {

const char* grammar_kind_name(GrammarSpec::Kind kind) {
    switch (kind) {
        case GrammarSpec::Kind::kJsonSchema: return "json_schema";
        case GrammarSpec::Kind::kJsonObject: return "json_object";
        case GrammarSpec::Kind::kRegex: return "regex";
        case GrammarSpec::Kind::kChoice: return "choice";
        case GrammarSpec::Kind::kGrammar: return "grammar";
        case GrammarSpec::Kind::kStructuralTag: return "structural_tag";
    }
    return "?";
}

CompiledGrammar::CompiledGrammar(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
CompiledGrammar::~CompiledGrammar() = default;
GrammarSpec::Kind CompiledGrammar::kind() const { return impl_->kind; }
int32_t CompiledGrammar::vocab_size() const { return impl_->vocab_size; }

struct GrammarCompiler::Impl {
    xgrammar::TokenizerInfo info;
    xgrammar::GrammarCompiler compiler;
    std::mutex mu;
    // Specs refused for a warning: xgrammar caches what it compiled, so a second compile of the
    // same spec would not warn again. Key: spec_key(); value: the error message.
    std::unordered_map<std::string, std::string> refused;
    Impl(const GrammarVocab& v, int threads)
        : info(v.tokens, xgrammar::VocabType::RAW, v.vocab_size, v.stop_token_ids, /*add_prefix_space=*/false),
          compiler(info, /*max_threads=*/threads, /*cache_enabled=*/true, /*max_memory_bytes=*/int64_t(512) << 20) {}
};

GrammarCompiler::GrammarCompiler(GrammarVocab vocab, int compile_threads)
    : vocab_(std::move(vocab)), impl_(std::make_unique<Impl>(vocab_, compile_threads < 1 ? 1 : compile_threads)) {}
GrammarCompiler::~GrammarCompiler() = default;

namespace {

// Lark grammars define rules with "name:"; xgrammar's EBNF with "name ::=".
bool looks_like_lark(const std::string& g) { return g.find("::=") == std::string::npos; }

// A regex inside the subset where xgrammar's two regex front ends give the same language: it
// matches ASCII text only, written in printable ASCII. Escapes only of punctuation (\. \( \\ ...)
// and \d \w; groups plain or (?:...). Left out: whatever can match a non-ASCII character
// (`.`, [^...], \D, \W, \S: the automaton's UTF-8 byte ranges accept overlong encodings such as
// E0 80..9F, the converter's do not; tests/unit/grammar_test.cpp sees the difference), \s (the
// converter's includes U+00A0), \x \u \c \n ... (different escape readers), (?i) and other
// modifiers, non-ASCII bytes.
bool regex_in_automaton_subset(const std::string& r) {
    bool in_class = false;
    for (size_t i = 0; i < r.size(); ++i) {
        const unsigned char c = static_cast<unsigned char>(r[i]);
        if (c < 0x20 || c > 0x7e) return false;
        if (c == '\\') {
            if (++i >= r.size()) return false;
            const unsigned char e = static_cast<unsigned char>(r[i]);
            if (e < 0x20 || e > 0x7e || (std::isalnum(e) && e != 'd' && e != 'w')) return false;
        } else if (in_class) {
            in_class = c != ']';
        } else if (c == '[') {
            if (i + 1 < r.size() && r[i + 1] == '^') return false;
            in_class = true;
        } else if (c == '.') {
            return false;
        } else if (c == '(' && i + 1 < r.size() && r[i + 1] == '?') {
            if (i + 2 >= r.size() || r[i + 2] != ':') return false;
        }
    }
    return true;
}

// A regex. xgrammar's CompileRegex goes through its regex → EBNF converter, which turns every
// `+` (and every `*` of anything but a character class) into a right-recursive rule
// (`[a-z ]+` → `r ::= [a-z ] r | [a-z ]`). A state inside such a rule is not the root rule's,
// so its precomputed mask leaves "uncertain" every token that could leave the rule (for
// `[a-z ]+`: every token that starts with a letter or space, most of the vocabulary), and
// each mask re-checks them with the Earley parser through a completion chain as long as the
// output so far: milliseconds per row, growing with the reply. The same regex as one
// Regex("...") expression (what xgrammar's JSON-schema converter emits for "pattern") is one
// automaton in the root rule, whose masks are fully precomputed: microseconds. Same language,
// hence the same masks (tests/unit/grammar_test.cpp and grammar_mask_bench compare them with
// the converter's); used only inside regex_in_automaton_subset, and when the automaton
// builder refuses the pattern, the converter's grammar is used as before. The converter still
// reads the regex first, so a regex it refuses or warns about is refused as before.
xgrammar::CompiledGrammar compile_regex(xgrammar::GrammarCompiler& c, const std::string& regex, bool reference,
                                        XgrammarWarningCapture& capture) {
    if (reference) return c.CompileRegex(regex);
    (void)xgrammar::Grammar::FromRegex(regex);  // throws, or warns, as CompileRegex would
    if (!capture.warnings().empty() || !regex_in_automaton_subset(regex)) return c.CompileRegex(regex);
    try {
        xgrammar::CompiledGrammar g = c.CompileGrammar("root ::= Regex(" + ebnf_literal(regex) + ")", "root");
        if (capture.warnings().empty()) return g;
    } catch (const std::exception&) {
    }
    capture.drop_after(0);
    return c.CompileRegex(regex);
}

// A JSON schema. xgrammar's converter writes bounded character repetitions (a `maxLength`
// string's body, each whitespace slot under the whitespace bound) that its compiler unrolls into
// chains of rules, whose masks re-check most of the vocabulary with the Earley parser: up to
// 0.1–0.2 s for one row. The same grammar with each of them as one automaton
// (repetition_automaton.h) accepts the same bytes, so its masks are the same
// (tests/unit/grammar_test.cpp and grammar_mask_bench compare them with CompileJSONSchema's),
// and cost microseconds. The converter runs first either way, so its errors and warnings are
// as before; a grammar the rewrite does not understand, or that does not compile, is compiled
// by CompileJSONSchema as before.
xgrammar::CompiledGrammar compile_json_schema(xgrammar::GrammarCompiler& c, const std::string& schema,
                                              bool any_whitespace, bool strict, bool reference,
                                              XgrammarWarningCapture& capture) {
    const std::optional<std::pair<std::string, std::string>> compact =
        any_whitespace ? std::nullopt : std::optional<std::pair<std::string, std::string>>({",", ":"});
    if (reference) return c.CompileJSONSchema(schema, any_whitespace, std::nullopt, compact, strict, kMaxJsonWhitespace);
    const xgrammar::Grammar grammar =
        xgrammar::Grammar::FromJSONSchema(schema, any_whitespace, std::nullopt, compact, strict, kMaxJsonWhitespace);
    if (!capture.warnings().empty()) return c.CompileGrammar(grammar);  // refused by the caller
    if (const std::optional<std::string> rewritten = repetitions_as_automata(grammar.ToString())) {
        try {
            xgrammar::CompiledGrammar g = c.CompileGrammar(*rewritten, "root");
            if (capture.warnings().empty()) return g;
        } catch (const std::exception&) {
        }
        capture.drop_after(0);
    }
    return c.CompileJSONSchema(schema, any_whitespace, std::nullopt, compact, strict, kMaxJsonWhitespace);
}

xgrammar::CompiledGrammar compile_spec(xgrammar::GrammarCompiler& c, const GrammarSpec& s, bool reference,
                                       XgrammarWarningCapture& capture) {
    using K = GrammarSpec::Kind;
    switch (s.kind) {
        case K::kJsonSchema:
            return compile_json_schema(c, s.text, s.any_whitespace, /*strict=*/true, reference, capture);
        case K::kJsonObject:
            // Any object: strict mode would close it to additional properties.
            return compile_json_schema(c, R"({"type": "object"})", s.any_whitespace, /*strict=*/false, reference,
                                       capture);
        case K::kRegex: return compile_regex(c, s.text, reference, capture);
        case K::kChoice: {
            std::string g = "root ::= ";
            for (size_t i = 0; i < s.choices.size(); ++i) g += (i ? " | " : "") + ebnf_literal(s.choices[i]);
            return c.CompileGrammar(g, "root");
        }
        case K::kGrammar: return looks_like_lark(s.text) ? c.CompileLark(s.text) : c.CompileGrammar(s.text, "root");
        case K::kStructuralTag: return c.CompileStructuralTag(s.text);
    }
    throw std::runtime_error("unknown grammar kind");
}

// xgrammar's messages carry a "[time] file:line: " prefix and a trailing newline: keep the text.
std::string clean(std::string m) {
    while (!m.empty() && (m.back() == '\n' || m.back() == ' ')) m.pop_back();
    const size_t at = m.find(".cc:");
    if (at != std::string::npos) {
        const size_t colon = m.find(": ", at);
        if (colon != std::string::npos) m = m.substr(colon + 2);
    }
    return m;
}

std::string spec_key(const GrammarSpec& s) {
    std::string k = fmt::format("{}|{}|{}", int(s.kind), s.any_whitespace ? 1 : 0, s.text);
    for (const std::string& c : s.choices) k += fmt::format("|{}:{}", c.size(), c);
    return k;
}

constexpr size_t kMaxRefusedKept = 4096;

}  // namespace

Result<std::shared_ptr<const CompiledGrammar>> GrammarCompiler::compile(const GrammarSpec& spec) const {
    return compile_as(spec, /*reference=*/false);
}

Result<std::shared_ptr<const CompiledGrammar>> GrammarCompiler::compile_reference(const GrammarSpec& spec) const {
    return compile_as(spec, /*reference=*/true);
}

Result<std::shared_ptr<const CompiledGrammar>> GrammarCompiler::compile_as(const GrammarSpec& spec,
                                                                           bool reference) const {
    using K = GrammarSpec::Kind;
    if (spec.kind == K::kChoice && spec.choices.empty()) return invalid_argument("the choice list is empty");
    if (spec.kind == K::kJsonSchema) {
        const auto schema = nlohmann::json::parse(spec.text, nullptr, false);
        if (schema.is_discarded()) return invalid_argument("the json_schema is not valid JSON");
        if (auto bad = unsupported_schema_feature(schema))
            return invalid_argument(fmt::format("the json_schema uses a feature that is not supported: {}", *bad));
    }
    std::lock_guard<std::mutex> lock(impl_->mu);
    const std::string key = spec_key(spec);
    if (auto it = impl_->refused.find(key); it != impl_->refused.end()) return invalid_argument(it->second);
    XgrammarWarningCapture capture;
    try {
        xgrammar::CompiledGrammar compiled = compile_spec(impl_->compiler, spec, reference, capture);
        if (!capture.warnings().empty()) {
            std::string m = fmt::format("the {} uses a feature that is not supported: {}", grammar_kind_name(spec.kind),
                                        clean(capture.warnings().front()));
            if (impl_->refused.size() >= kMaxRefusedKept) impl_->refused.clear();
            impl_->refused.emplace(key, m);
            return invalid_argument(std::move(m));
        }
        auto impl = std::make_unique<CompiledGrammar::Impl>(
            CompiledGrammar::Impl{std::move(compiled), spec.kind, vocab_.vocab_size});
        return std::shared_ptr<const CompiledGrammar>(std::make_shared<CompiledGrammar>(std::move(impl)));
    } catch (const std::exception& e) {
        return invalid_argument(fmt::format("the {} does not compile: {}", grammar_kind_name(spec.kind), clean(e.what())));
    }
}

}  // namespace qs::grammar

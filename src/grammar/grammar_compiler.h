// Structured outputs, compile side: GrammarSpec → CompiledGrammar over the model's vocabulary,
// with xgrammar's C++ core (built by scripts/setup_xgrammar.sh) behind this interface, so no
// other directory sees xgrammar or its exceptions. Compile errors, and schema features that
// xgrammar would silently drop (it warns and loosens the grammar), come back as
// kInvalidArgument naming the problem. Compiled grammars are cached by xgrammar (same spec, no
// recompilation). Thread-safe: the server's workers compile (one at a time), the engine thread
// only reads what they made.
#pragma once

#include <memory>
#include <string>

#include "core/status.h"
#include "grammar/grammar_spec.h"
#include "grammar/grammar_vocab.h"

namespace qs::grammar {

// An immutable compiled grammar, shared by the matchers of every sequence that uses it.
class CompiledGrammar {
public:
    struct Impl;
    explicit CompiledGrammar(std::unique_ptr<Impl> impl);
    ~CompiledGrammar();
    CompiledGrammar(const CompiledGrammar&) = delete;
    CompiledGrammar& operator=(const CompiledGrammar&) = delete;

    GrammarSpec::Kind kind() const;
    int32_t vocab_size() const;  // the width of its bitmasks, in tokens
    const Impl& impl() const { return *impl_; }

private:
    std::unique_ptr<Impl> impl_;
};

class GrammarCompiler {
public:
    // compile_threads: the threads xgrammar may use for one compile (the first compile of a
    // grammar precomputes its token masks over the whole vocabulary: seconds at 248k tokens).
    explicit GrammarCompiler(GrammarVocab vocab, int compile_threads = kDefaultCompileThreads);
    static constexpr int kDefaultCompileThreads = 2;
    ~GrammarCompiler();

    Result<std::shared_ptr<const CompiledGrammar>> compile(const GrammarSpec& spec) const;
    // The spec through xgrammar's own entry point, without compile()'s faster equivalent form
    // (a regex through xgrammar's regex → EBNF converter, a JSON schema through
    // CompileJSONSchema; see grammar_compiler.cpp, repetition_automaton.h): the
    // reference that tests and bench/grammar_mask_bench compare compile()'s masks with. Same
    // errors as compile().
    Result<std::shared_ptr<const CompiledGrammar>> compile_reference(const GrammarSpec& spec) const;
    const GrammarVocab& vocab() const { return vocab_; }

private:
    Result<std::shared_ptr<const CompiledGrammar>> compile_as(const GrammarSpec& spec, bool reference) const;
    struct Impl;
    GrammarVocab vocab_;
    std::unique_ptr<Impl> impl_;
};

}  // namespace qs::grammar

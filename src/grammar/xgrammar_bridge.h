// Internal to src/grammar: the xgrammar objects behind CompiledGrammar, and the capture of
// xgrammar's log output (xgrammar is built with XGRAMMAR_LOG_CUSTOMIZE=1, so its warnings and
// fatal errors call the functions xgrammar_log.cpp defines). Not included outside src/grammar.
#pragma once

#include <xgrammar/xgrammar.h>

#include <string>
#include <vector>

#include "grammar/grammar_compiler.h"

namespace qs::grammar {

struct CompiledGrammar::Impl {
    xgrammar::CompiledGrammar compiled;
    GrammarSpec::Kind kind;
    int32_t vocab_size;
};

// While one is alive, xgrammar's warnings on this thread are collected into `warnings` instead
// of being logged. Not nestable.
class XgrammarWarningCapture {
public:
    XgrammarWarningCapture();
    ~XgrammarWarningCapture();
    const std::vector<std::string>& warnings() const { return warnings_; }
    // Forgets the warnings after the first n (those of an attempt that was given up).
    void drop_after(size_t n) {
        if (warnings_.size() > n) warnings_.resize(n);
    }

private:
    std::vector<std::string> warnings_;
};

}  // namespace qs::grammar

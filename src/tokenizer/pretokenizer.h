// The Split pre-tokenizer: cuts normalised text into pieces with the regex taken from
// tokenizer.json ("Isolated" behaviour: every match and every gap between matches is a piece).
// The pattern is compiled with PCRE2 (UTF, Unicode properties, JIT). Hugging Face runs these
// patterns with Oniguruma, whose \s is the Unicode White_Space property; PCRE2's \s lacks
// U+0085, so \s and \S are rewritten to that exact set before compiling, and \p{L}, \p{M},
// \p{N}, \p{Z} get the code points Oniguruma's Unicode 16.0 tables have and PCRE2's lack
// (see translate_regex).
// Immutable after construction; split() may run on many threads at once.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace qs::tok {

// Rewrites \s / \S and general-category classes as above; an error names an unsupported construct.
Result<std::string> translate_regex(const std::string& pattern);

class RegexSplitter {
public:
    static Result<std::unique_ptr<RegexSplitter>> create(const std::string& pattern);
    ~RegexSplitter();
    RegexSplitter(const RegexSplitter&) = delete;
    RegexSplitter& operator=(const RegexSplitter&) = delete;

    // Appends the pieces of `text` (valid UTF-8) to `pieces`, in order; they tile the text.
    void split(std::string_view text, std::vector<std::string_view>& pieces) const;

    const std::string& pattern() const { return pattern_; }

private:
    RegexSplitter() = default;
    std::string pattern_;
    void* code_ = nullptr;  // pcre2_code_8*
};

}  // namespace qs::tok

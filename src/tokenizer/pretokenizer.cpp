// PCRE2-backed regex splitting for the Split pre-tokenizer (see pretokenizer.h).
#define PCRE2_CODE_UNIT_WIDTH 8
#include "tokenizer/pretokenizer.h"

#include <pcre2.h>

#include "core/check.h"

namespace qs::tok {

namespace {

// Unicode White_Space, which is what \s means in Oniguruma (HF tokenizers) and Rust's regex
// (tiktoken): TAB..CR, SPACE, NEL, and the separators (Zs, Zl, Zp).
constexpr const char* kSpaceSetBody = "\\t-\\r \\x{85}\\p{Z}";

struct MatchState {
    pcre2_match_data* data = nullptr;
    pcre2_match_context* context = nullptr;
    pcre2_jit_stack* stack = nullptr;
    MatchState() {
        data = pcre2_match_data_create(32, nullptr);
        context = pcre2_match_context_create(nullptr);
        stack = pcre2_jit_stack_create(32 * 1024, 4 * 1024 * 1024, nullptr);
        pcre2_jit_stack_assign(context, nullptr, stack);
    }
    ~MatchState() {
        pcre2_jit_stack_free(stack);
        pcre2_match_context_free(context);
        pcre2_match_data_free(data);
    }
};

// Code points of Unicode 16.0 (Oniguruma's tables in HF tokenizers) that PCRE2's \p{X} lacks
// (tools/unicode_class_table.py; tests/unit/tokenizer_unicode_test.cpp checks the union).
struct ClassFix {
    const char* name;
    const char* ranges;
};
constexpr ClassFix kClassFixes[] = {
#include "tokenizer/unicode_class_fixes.inc"
};

const char* class_fix(const std::string& name) {
    for (const ClassFix& fix : kClassFixes)
        if (name == fix.name) return fix.ranges;
    return nullptr;
}

MatchState& thread_match_state() {
    thread_local MatchState state;
    return state;
}

}  // namespace

Result<std::string> translate_regex(const std::string& pattern) {
    std::string out;
    bool in_class = false;
    for (size_t i = 0; i < pattern.size(); ++i) {
        const char c = pattern[i];
        if (c == '\\' && i + 1 < pattern.size()) {
            const char e = pattern[i + 1];
            ++i;
            if (e == 's') {
                out += in_class ? std::string(kSpaceSetBody) : "[" + std::string(kSpaceSetBody) + "]";
            } else if (e == 'S') {
                if (in_class) return unsupported("regex uses \\S inside a character class: " + pattern);
                out += "[^" + std::string(kSpaceSetBody) + "]";
            } else if (e == 'p' || e == 'P') {
                // \pL or \p{Name}: general categories get the Unicode 16.0 code points PCRE2 lacks.
                std::string name;
                size_t end = i + 1;
                if (end < pattern.size() && pattern[end] == '{') {
                    const size_t close = pattern.find('}', end);
                    if (close == std::string::npos) return invalid_argument("regex has an unterminated \\p{: " + pattern);
                    name = pattern.substr(end + 1, close - end - 1);
                    end = close + 1;
                } else if (end < pattern.size()) {
                    name = pattern.substr(end, 1);
                    end += 1;
                }
                const std::string property = "\\p{" + name + "}";
                const char* fix = class_fix(name);
                if (fix == nullptr) {
                    out += std::string("\\") + e + "{" + name + "}";
                } else if (e == 'p') {
                    out += in_class ? property + fix : "[" + property + fix + "]";
                } else {
                    if (in_class) return unsupported("regex uses \\P{...} inside a character class: " + pattern);
                    out += "[^" + property + fix + "]";
                }
                i = end - 1;
            } else {
                out += c;
                out += e;
            }
            continue;
        }
        if (!in_class && c == '[') {
            in_class = true;
            out += c;
            // A ']' right after '[' or '[^' is literal.
            if (i + 1 < pattern.size() && pattern[i + 1] == '^') { out += '^'; ++i; }
            if (i + 1 < pattern.size() && pattern[i + 1] == ']') { out += ']'; ++i; }
            continue;
        }
        if (in_class && c == '[' && i + 1 < pattern.size() && pattern[i + 1] == ':')
            return unsupported("regex uses a POSIX class: " + pattern);
        if (in_class && c == ']') in_class = false;
        out += c;
    }
    if (in_class) return invalid_argument("regex has an unterminated character class: " + pattern);
    return out;
}

Result<std::unique_ptr<RegexSplitter>> RegexSplitter::create(const std::string& pattern) {
    QS_ASSIGN_OR_RETURN(std::string translated, translate_regex(pattern));
    int error = 0;
    PCRE2_SIZE offset = 0;
    pcre2_code* code =
        pcre2_compile(reinterpret_cast<PCRE2_SPTR>(translated.data()), translated.size(),
                      PCRE2_UTF | PCRE2_UCP | PCRE2_NO_UTF_CHECK, &error, &offset, nullptr);
    if (code == nullptr) {
        PCRE2_UCHAR message[256];
        pcre2_get_error_message(error, message, sizeof(message));
        return invalid_argument("pre-tokenizer regex does not compile at offset " +
                                std::to_string(offset) + ": " +
                                reinterpret_cast<const char*>(message) + ": " + pattern);
    }
    // JIT is an optimisation only: without it (e.g. an unsupported CPU) matching still works.
    pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);
    std::unique_ptr<RegexSplitter> splitter(new RegexSplitter());
    splitter->pattern_ = pattern;
    splitter->code_ = code;
    return splitter;
}

RegexSplitter::~RegexSplitter() { pcre2_code_free(static_cast<pcre2_code*>(code_)); }

void RegexSplitter::split(std::string_view text, std::vector<std::string_view>& pieces) const {
    auto* code = static_cast<pcre2_code*>(code_);
    MatchState& state = thread_match_state();
    const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
    size_t start = 0;  // where the next gap begins
    size_t pos = 0;
    while (pos < text.size()) {
        const int rc = pcre2_match(code, subject, text.size(), pos, PCRE2_NO_UTF_CHECK, state.data,
                                   state.context);
        if (rc == PCRE2_ERROR_NOMATCH) break;
        QS_CHECK_MSG(rc >= 0, "pcre2_match failed on the pre-tokenizer regex");
        const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(state.data);
        const size_t m_begin = ovector[0];
        const size_t m_end = ovector[1];
        if (m_end == m_begin) {
            // Empty match: produces no piece; step one character forward.
            pos = m_end + 1;
            while (pos < text.size() && (static_cast<uint8_t>(text[pos]) & 0xC0) == 0x80) ++pos;
            continue;
        }
        if (m_begin > start) pieces.push_back(text.substr(start, m_begin - start));
        pieces.push_back(text.substr(m_begin, m_end - m_begin));
        start = pos = m_end;
    }
    if (start < text.size()) pieces.push_back(text.substr(start));
}

}  // namespace qs::tok

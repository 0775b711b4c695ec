// Jinja lexer (see lexer.h).
#include "jinja/lexer.h"

#include <cstring>

#include "jinja/error.h"
#include "jinja/value.h"
#include "tokenizer/unicode.h"

namespace qs::jinja {

namespace {

std::string normalize_newlines(const std::string& s) {
    std::string out;
    out.reserve(s.size());
    for (size_t i = 0; i < s.size(); ++i) {
        if (s[i] == '\r') {
            out.push_back('\n');
            if (i + 1 < s.size() && s[i + 1] == '\n') ++i;
        } else {
            out.push_back(s[i]);
        }
    }
    if (!out.empty() && out.back() == '\n') out.pop_back();
    return out;
}

bool is_name_start(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool is_digit(char c) { return c >= '0' && c <= '9'; }

class Lexer {
public:
    Lexer(const std::string& source, const LexOptions& options) : src_(normalize_newlines(source)), opt_(options) {}

    std::vector<Token> run() {
        bool line_starting = true;
        while (pos_ < src_.size()) {
            size_t start = find_tag(pos_);
            std::string text = src_.substr(pos_, start - pos_);
            if (start == src_.size()) {
                emit_text(std::move(text));
                pos_ = start;
                break;
            }
            const char kind = src_[start + 1];  // '{', '%' or '#'
            const char sign = start + 2 < src_.size() ? src_[start + 2] : '\0';
            if (sign == '-') {
                text = py_strip(text, false, true);
            } else if (sign != '+' && opt_.lstrip_blocks && kind != '{') {
                const size_t l_pos = text.rfind('\n') == std::string::npos ? 0 : text.rfind('\n') + 1;
                if ((l_pos > 0 || line_starting) && text.find_first_not_of(" \t", l_pos) == std::string::npos)
                    text.resize(l_pos);
            }
            emit_text(std::move(text));
            advance_to(start);
            pos_ = start + 2 + ((sign == '-' || sign == '+') ? 1 : 0);
            if (kind == '#') {
                const size_t end = src_.find("#}", pos_);
                if (end == std::string::npos) fail("unclosed comment: '{#' has no '#}'", line_);
                const bool strip = end > pos_ && src_[end - 1] == '-';
                advance_to(end + 2);
                pos_ = end + 2;
                line_starting = finish_tag(strip, opt_.trim_blocks);
                continue;
            }
            const bool block = kind == '%';
            const int tag_line = line_;
            tokens_.push_back({block ? TokenType::kBlockBegin : TokenType::kVarBegin, "", 0, 0, line_});
            if (block && raw_block()) {
                line_starting = false;
                continue;
            }
            const char* end = block ? "%}" : "}}";
            bool strip = false;
            while (true) {
                skip_space();
                if (pos_ >= src_.size())
                    fail(std::string("unclosed tag: '") + (block ? "{%" : "{{") + "' opened on line " +
                             std::to_string(tag_line) + " has no '" + end + "'",
                         tag_line);
                if (src_.compare(pos_, 2, end) == 0) break;
                if (src_[pos_] == '-' && src_.compare(pos_ + 1, 2, end) == 0) {
                    strip = true;
                    ++pos_;
                    break;
                }
                lex_token();
            }
            pos_ += 2;
            tokens_.push_back({block ? TokenType::kBlockEnd : TokenType::kVarEnd, "", 0, 0, line_});
            line_starting = finish_tag(strip, block && opt_.trim_blocks);
        }
        tokens_.push_back({TokenType::kEof, "", 0, 0, line_});
        return std::move(tokens_);
    }

private:
    size_t find_tag(size_t from) const {
        for (size_t i = from; i + 1 < src_.size(); ++i)
            if (src_[i] == '{' && (src_[i + 1] == '{' || src_[i + 1] == '%' || src_[i + 1] == '#')) return i;
        return src_.size();
    }

    void emit_text(std::string text) {
        if (text.empty()) return;
        const int line = line_;
        tokens_.push_back({TokenType::kText, std::move(text), 0, 0, line});
    }

    // Moves the line counter to `to` (pos_ is set by the caller).
    void advance_to(size_t to) {
        for (size_t i = line_pos_; i < to && i < src_.size(); ++i)
            if (src_[i] == '\n') ++line_;
        line_pos_ = std::max(line_pos_, to);
    }

    // After a tag's closing delimiter: `-` strips all whitespace, trim_blocks one newline.
    // Returns whether what was consumed ended a line (jinja2's line_starting).
    bool finish_tag(bool strip, bool trim_newline) {
        const size_t from = pos_;
        if (strip) {
            const std::string rest = py_strip(src_.substr(pos_), true, false);
            pos_ = src_.size() - rest.size();
        } else if (trim_newline && pos_ < src_.size() && src_[pos_] == '\n') {
            ++pos_;
        }
        advance_to(pos_);
        return pos_ > from && src_[pos_ - 1] == '\n';
    }

    void skip_space() {
        while (pos_ < src_.size() && std::strchr(" \t\n\r\f\v", src_[pos_]) && src_[pos_] != '\0') ++pos_;
        advance_to(pos_);
    }

    // {% raw %}...{% endraw %}: the text between, untouched.
    bool raw_block() {
        size_t p = pos_;
        while (p < src_.size() && (src_[p] == ' ' || src_[p] == '\t')) ++p;
        if (src_.compare(p, 3, "raw") != 0) return false;
        p += 3;
        while (p < src_.size() && (src_[p] == ' ' || src_[p] == '\t')) ++p;
        const bool strip_body_start = p < src_.size() && src_[p] == '-';
        if (strip_body_start) ++p;
        if (src_.compare(p, 2, "%}") != 0) return false;
        tokens_.pop_back();
        size_t body = p + 2;
        if (strip_body_start)
            while (body < src_.size() && std::strchr(" \t\n\r\f\v", src_[body]) && src_[body] != '\0') ++body;
        size_t search = body;
        while (true) {
            const size_t open = src_.find("{%", search);
            if (open == std::string::npos) fail("unclosed {% raw %}: no {% endraw %}", line_);
            size_t q = open + 2;
            if (q < src_.size() && (src_[q] == '-' || src_[q] == '+')) ++q;
            while (q < src_.size() && (src_[q] == ' ' || src_[q] == '\t')) ++q;
            if (src_.compare(q, 6, "endraw") == 0) {
                std::string text = src_.substr(body, open - body);
                if (src_[open + 2] == '-') text = py_strip(text, false, true);
                emit_text(std::move(text));
                const size_t close = src_.find("%}", q);
                if (close == std::string::npos) fail("unclosed {% endraw %}", line_);
                advance_to(close + 2);
                pos_ = close + 2;
                finish_tag(src_[close - 1] == '-', opt_.trim_blocks);
                return true;
            }
            search = open + 2;
        }
    }

    void lex_token() {
        const int line = line_;
        const char c = src_[pos_];
        if (is_name_start(c)) {
            size_t e = pos_;
            while (e < src_.size() && (is_name_start(src_[e]) || is_digit(src_[e]))) ++e;
            tokens_.push_back({TokenType::kName, src_.substr(pos_, e - pos_), 0, 0, line});
            pos_ = e;
            return;
        }
        if (is_digit(c)) {
            size_t e = pos_;
            while (e < src_.size() && (is_digit(src_[e]) || src_[e] == '_')) ++e;
            bool is_float = false;
            if (e + 1 < src_.size() && src_[e] == '.' && is_digit(src_[e + 1])) {
                is_float = true;
                ++e;
                while (e < src_.size() && (is_digit(src_[e]) || src_[e] == '_')) ++e;
            }
            if (e < src_.size() && (src_[e] == 'e' || src_[e] == 'E')) {
                size_t f = e + 1;
                if (f < src_.size() && (src_[f] == '+' || src_[f] == '-')) ++f;
                if (f < src_.size() && is_digit(src_[f])) {
                    is_float = true;
                    e = f;
                    while (e < src_.size() && is_digit(src_[e])) ++e;
                }
            }
            std::string digits;
            for (size_t i = pos_; i < e; ++i)
                if (src_[i] != '_') digits.push_back(src_[i]);
            Token t{is_float ? TokenType::kFloat : TokenType::kInt, digits, 0, 0, line};
            if (is_float) t.float_value = std::stod(digits);
            else t.int_value = std::stoll(digits);
            tokens_.push_back(std::move(t));
            pos_ = e;
            return;
        }
        if (c == '\'' || c == '"') {
            lex_string(c);
            return;
        }
        static const char* const kOps[] = {"//", "**", "==", "!=", "<=", ">=", "+", "-", "*", "/", "%", "~", "<",
                                           ">", "(", ")", "[", "]", "{", "}", ",", ".", ":", "|", "=", ";"};
        for (const char* op : kOps) {
            const size_t n = std::strlen(op);
            if (src_.compare(pos_, n, op) == 0) {
                tokens_.push_back({TokenType::kOp, op, 0, 0, line});
                pos_ += n;
                return;
            }
        }
        fail(std::string("unexpected character '") + c + "' in a tag", line);
    }

    void lex_string(char quote) {
        const int line = line_;
        std::string value;
        size_t p = pos_ + 1;
        while (true) {
            if (p >= src_.size()) fail("unterminated string literal", line);
            const char c = src_[p];
            if (c == quote) break;
            if (c != '\\') {
                value.push_back(c);
                ++p;
                continue;
            }
            if (p + 1 >= src_.size()) fail("unterminated string literal", line);
            const char e = src_[p + 1];
            p += 2;
            switch (e) {
                case 'n': value.push_back('\n'); break;
                case 't': value.push_back('\t'); break;
                case 'r': value.push_back('\r'); break;
                case '0': value.push_back('\0'); break;
                case 'a': value.push_back('\a'); break;
                case 'b': value.push_back('\b'); break;
                case 'f': value.push_back('\f'); break;
                case 'v': value.push_back('\v'); break;
                case '\\': value.push_back('\\'); break;
                case '\'': value.push_back('\''); break;
                case '"': value.push_back('"'); break;
                case '\n': break;
                case 'x':
                case 'u':
                case 'U': {
                    const size_t n = e == 'x' ? 2 : e == 'u' ? 4 : 8;
                    if (p + n > src_.size()) fail("bad \\" + std::string(1, e) + " escape in a string", line);
                    uint32_t cp = 0;
                    for (size_t i = 0; i < n; ++i) {
                        const char h = src_[p + i];
                        const int d = is_digit(h) ? h - '0' : (h >= 'a' && h <= 'f') ? h - 'a' + 10
                                                            : (h >= 'A' && h <= 'F') ? h - 'A' + 10 : -1;
                        if (d < 0) fail("bad \\" + std::string(1, e) + " escape in a string", line);
                        cp = cp * 16 + uint32_t(d);
                    }
                    p += n;
                    tok::utf8_append(value, cp);
                    break;
                }
                default:
                    value.push_back('\\');
                    value.push_back(e);
            }
        }
        advance_to(p + 1);
        pos_ = p + 1;
        tokens_.push_back({TokenType::kString, std::move(value), 0, 0, line});
    }

    std::string src_;
    LexOptions opt_;
    size_t pos_ = 0;
    size_t line_pos_ = 0;
    int line_ = 1;
    std::vector<Token> tokens_;
};

}  // namespace

std::vector<Token> tokenize(const std::string& source, const LexOptions& options) {
    return Lexer(source, options).run();
}

}  // namespace qs::jinja

// Python-compatible formatting for chat templates (see python_format.h).
#include "tokenizer/python_format.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>

#include "tokenizer/unicode.h"

namespace qs::tok {

std::string python_float_repr(double value) {
    if (std::isnan(value)) return "NaN";
    if (std::isinf(value)) return value > 0 ? "Infinity" : "-Infinity";
    if (value == 0.0) return std::signbit(value) ? "-0.0" : "0.0";
    char buf[64];
    auto res = std::to_chars(buf, buf + sizeof(buf), value, std::chars_format::scientific);
    std::string sci(buf, res.ptr);  // e.g. "-1.2345e-05"
    std::string sign;
    if (sci[0] == '-') {
        sign = "-";
        sci.erase(0, 1);
    }
    const size_t e = sci.find('e');
    std::string digits = sci.substr(0, e);
    digits.erase(std::remove(digits.begin(), digits.end(), '.'), digits.end());
    const int exp = std::stoi(sci.substr(e + 1));
    std::string out;
    if (exp >= -4 && exp < 16) {
        if (exp >= 0) {
            std::string int_part = digits.substr(0, std::min<size_t>(digits.size(), exp + 1));
            int_part.append(static_cast<size_t>(exp + 1) - int_part.size(), '0');
            const std::string frac = digits.size() > static_cast<size_t>(exp + 1) ? digits.substr(exp + 1) : "0";
            out = int_part + "." + frac;
        } else {
            out = "0." + std::string(static_cast<size_t>(-exp - 1), '0') + digits;
        }
    }
    if (out.empty()) {
        out = digits.substr(0, 1);
        if (digits.size() > 1) out += "." + digits.substr(1);
        char ebuf[16];
        std::snprintf(ebuf, sizeof(ebuf), "e%c%02d", exp < 0 ? '-' : '+', std::abs(exp));
        out += ebuf;
    }
    return sign + out;
}

void python_json_dump_string(const std::string& s, std::string& out) {
    out.push_back('"');
    for (unsigned char c : s) {
        switch (c) {
            case '"': out += "\\\""; break;
            case '\\': out += "\\\\"; break;
            case '\n': out += "\\n"; break;
            case '\r': out += "\\r"; break;
            case '\t': out += "\\t"; break;
            case '\b': out += "\\b"; break;
            case '\f': out += "\\f"; break;
            default:
                if (c < 0x20) {
                    char buf[8];
                    std::snprintf(buf, sizeof(buf), "\\u%04x", c);
                    out += buf;
                } else {
                    out.push_back(static_cast<char>(c));
                }
        }
    }
    out.push_back('"');
}

namespace {


void dump(const OrderedJson& v, std::string& out) {
    switch (v.type()) {
        case OrderedJson::value_t::null: out += "null"; break;
        case OrderedJson::value_t::boolean: out += v.get<bool>() ? "true" : "false"; break;
        case OrderedJson::value_t::number_integer: out += std::to_string(v.get<int64_t>()); break;
        case OrderedJson::value_t::number_unsigned: out += std::to_string(v.get<uint64_t>()); break;
        case OrderedJson::value_t::number_float: out += python_float_repr(v.get<double>()); break;
        case OrderedJson::value_t::string: python_json_dump_string(v.get_ref<const std::string&>(), out); break;
        case OrderedJson::value_t::array: {
            out.push_back('[');
            bool first = true;
            for (const auto& item : v) {
                if (!first) out += ", ";
                first = false;
                dump(item, out);
            }
            out.push_back(']');
            break;
        }
        case OrderedJson::value_t::object: {
            out.push_back('{');
            bool first = true;
            for (const auto& [key, item] : v.items()) {
                if (!first) out += ", ";
                first = false;
                python_json_dump_string(key, out);
                out += ": ";
                dump(item, out);
            }
            out.push_back('}');
            break;
        }
        default: out += "null"; break;
    }
}

}  // namespace

std::string python_json_dumps(const OrderedJson& value) {
    std::string out;
    dump(value, out);
    return out;
}

bool python_str(const OrderedJson& value, std::string& out) {
    switch (value.type()) {
        case OrderedJson::value_t::null: out = "None"; return true;
        case OrderedJson::value_t::boolean: out = value.get<bool>() ? "True" : "False"; return true;
        case OrderedJson::value_t::number_integer: out = std::to_string(value.get<int64_t>()); return true;
        case OrderedJson::value_t::number_unsigned: out = std::to_string(value.get<uint64_t>()); return true;
        case OrderedJson::value_t::number_float: {
            const double d = value.get<double>();
            out = std::isnan(d) ? "nan" : std::isinf(d) ? (d > 0 ? "inf" : "-inf") : python_float_repr(d);
            return true;
        }
        case OrderedJson::value_t::string: out = value.get<std::string>(); return true;
        default: return false;
    }
}

bool python_isspace(uint32_t cp) {
    return (cp >= 0x09 && cp <= 0x0D) || (cp >= 0x1C && cp <= 0x20) || cp == 0x85 || cp == 0xA0 ||
           cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 ||
           cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

std::string python_strip(std::string_view s) {
    size_t begin = 0, end = s.size();
    while (begin < end) {
        const size_t len = utf8_valid_length(s, begin);
        if (len == 0 || !python_isspace(utf8_decode_at(s, begin, len))) break;
        begin += len;
    }
    while (end > begin) {
        size_t start = end - 1;
        while (start > begin && (static_cast<uint8_t>(s[start]) & 0xC0) == 0x80) --start;
        const size_t len = utf8_valid_length(s, start);
        if (len == 0 || start + len != end || !python_isspace(utf8_decode_at(s, start, len))) break;
        end = start;
    }
    return std::string(s.substr(begin, end - begin));
}

std::string_view strip_chars(std::string_view s, std::string_view chars, bool left, bool right) {
    size_t begin = 0, end = s.size();
    if (left)
        while (begin < end && chars.find(s[begin]) != std::string_view::npos) ++begin;
    if (right)
        while (end > begin && chars.find(s[end - 1]) != std::string_view::npos) --end;
    return s.substr(begin, end - begin);
}

}  // namespace qs::tok

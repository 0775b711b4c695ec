// Value (see value.h): Python's str/repr/equality/ordering and json.dumps for template values.
#include "jinja/value.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "tokenizer/python_format.h"
#include "tokenizer/unicode.h"

namespace qs::jinja {

const Value* Dict::find(const std::string& key) const {
    for (const auto& [k, v] : entries)
        if (k == key) return &v;
    return nullptr;
}

void Dict::set(const std::string& key, Value value) {
    for (auto& [k, v] : entries)
        if (k == key) {
            v = std::move(value);
            return;
        }
    entries.emplace_back(key, std::move(value));
}

const Value* CallArgs::get(size_t index, const std::string& name) const {
    for (const auto& [k, v] : keyword)
        if (k == name) return &v;
    return index < positional.size() ? &positional[index] : nullptr;
}

Value Value::callable(Function f, std::string name) {
    Value v;
    v.kind_ = Kind::kCallable;
    v.data_ = std::make_shared<Callable>(Callable{std::move(f), std::move(name)});
    return v;
}

Value Value::undefined(std::string hint) {
    Value v;
    v.data_ = std::make_shared<const std::string>(std::move(hint));
    return v;
}

const std::string& Value::undefined_hint() const {
    static const std::string empty;
    const auto* s = std::get_if<std::shared_ptr<const std::string>>(&data_);
    return s ? **s : empty;
}

Value Value::call(CallArgs& args) const { return std::get<std::shared_ptr<Callable>>(data_)->fn(args); }

const std::string& Value::callable_name() const { return std::get<std::shared_ptr<Callable>>(data_)->name; }

bool Value::truthy() const {
    switch (kind_) {
        case Kind::kUndefined:
        case Kind::kNone: return false;
        case Kind::kBool: return as_bool();
        case Kind::kInt: return as_int() != 0;
        case Kind::kFloat: return as_double() != 0.0;
        case Kind::kString: return !as_string().empty();
        case Kind::kList: return !as_list().empty();
        case Kind::kDict: return as_dict().is_namespace || !as_dict().entries.empty();
        case Kind::kCallable: return true;
    }
    return false;
}

std::string Value::type_name() const {
    switch (kind_) {
        case Kind::kUndefined: return "Undefined";
        case Kind::kNone: return "NoneType";
        case Kind::kBool: return "bool";
        case Kind::kInt: return "int";
        case Kind::kFloat: return "float";
        case Kind::kString: return "str";
        case Kind::kList: return "list";
        case Kind::kDict: return as_dict().is_namespace ? "Namespace" : "dict";
        case Kind::kCallable: return "function";
    }
    return "?";
}

namespace {

std::string float_str(double d) {
    if (std::isnan(d)) return "nan";
    if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
    return tok::python_float_repr(d);
}

std::string string_repr(const std::string& s) {
    const bool has_single = s.find('\'') != std::string::npos;
    const bool has_double = s.find('"') != std::string::npos;
    const char quote = has_single && !has_double ? '"' : '\'';
    std::string out(1, quote);
    for (unsigned char c : s) {
        if (c == '\\') out += "\\\\";
        else if (c == static_cast<unsigned char>(quote)) out += std::string("\\") + quote;
        else if (c == '\n') out += "\\n";
        else if (c == '\r') out += "\\r";
        else if (c == '\t') out += "\\t";
        else if (c < 0x20 || c == 0x7f) {
            static const char* hex = "0123456789abcdef";
            out += "\\x";
            out.push_back(hex[c >> 4]);
            out.push_back(hex[c & 15]);
        } else {
            out.push_back(static_cast<char>(c));
        }
    }
    out.push_back(quote);
    return out;
}

}  // namespace

std::string Value::str() const {
    switch (kind_) {
        case Kind::kUndefined: return "";
        case Kind::kString: return as_string();
        default: return repr();
    }
}

std::string Value::repr() const {
    switch (kind_) {
        case Kind::kUndefined: return "";
        case Kind::kNone: return "None";
        case Kind::kBool: return as_bool() ? "True" : "False";
        case Kind::kInt: return std::to_string(as_int());
        case Kind::kFloat: return float_str(as_double());
        case Kind::kString: return string_repr(as_string());
        case Kind::kList: {
            std::string out = tuple_ ? "(" : "[";
            for (size_t i = 0; i < as_list().size(); ++i) out += (i ? ", " : "") + as_list()[i].repr();
            if (tuple_) return out + (as_list().size() == 1 ? ",)" : ")");
            return out + "]";
        }
        case Kind::kDict: {
            const Dict& d = as_dict();
            std::string out = d.is_namespace ? "<Namespace {" : "{";
            for (size_t i = 0; i < d.entries.size(); ++i)
                out += (i ? ", " : "") + string_repr(d.entries[i].first) + ": " + d.entries[i].second.repr();
            return out + (d.is_namespace ? "}>" : "}");
        }
        case Kind::kCallable: return "<function " + callable_name() + ">";
    }
    return "";
}

bool Value::same_as(const Value& other) const {
    if (kind_ != other.kind_) return false;
    switch (kind_) {
        case Kind::kList: return &as_list() == &other.as_list();
        case Kind::kDict: return &as_dict() == &other.as_dict();
        case Kind::kCallable:
            return std::get<std::shared_ptr<Callable>>(data_) == std::get<std::shared_ptr<Callable>>(other.data_);
        default: return values_equal(*this, other);
    }
}

Value Value::from_json(const nlohmann::ordered_json& j) {
    using T = nlohmann::ordered_json::value_t;
    switch (j.type()) {
        case T::null: return none();
        case T::boolean: return Value(j.get<bool>());
        case T::number_integer: return Value(j.get<int64_t>());
        case T::number_unsigned: return Value(static_cast<int64_t>(j.get<uint64_t>()));
        case T::number_float: return Value(j.get<double>());
        case T::string: return Value(j.get<std::string>());
        case T::array: {
            List l;
            l.reserve(j.size());
            for (const auto& e : j) l.push_back(from_json(e));
            return Value(std::move(l));
        }
        case T::object: {
            Dict d;
            for (auto it = j.begin(); it != j.end(); ++it) d.entries.emplace_back(it.key(), from_json(it.value()));
            return Value(std::move(d));
        }
        default: return Value();
    }
}

bool values_equal(const Value& a, const Value& b) {
    if (a.is_number() && b.is_number()) {
        if (a.is_int() && b.is_int()) return a.as_int() == b.as_int();
        return a.as_double() == b.as_double();
    }
    if (a.kind() != b.kind()) return false;
    switch (a.kind()) {
        case Value::Kind::kUndefined:
        case Value::Kind::kNone: return true;
        case Value::Kind::kString: return a.as_string() == b.as_string();
        case Value::Kind::kList: {
            const List &x = a.as_list(), &y = b.as_list();
            if (x.size() != y.size() || a.is_tuple() != b.is_tuple()) return false;
            for (size_t i = 0; i < x.size(); ++i)
                if (!values_equal(x[i], y[i])) return false;
            return true;
        }
        case Value::Kind::kDict: {
            const Dict &x = a.as_dict(), &y = b.as_dict();
            if (x.is_namespace || y.is_namespace) return &x == &y;
            if (x.entries.size() != y.entries.size()) return false;
            for (const auto& [k, v] : x.entries) {
                const Value* o = y.find(k);
                if (!o || !values_equal(v, *o)) return false;
            }
            return true;
        }
        default: return a.same_as(b);
    }
}

int values_compare(const Value& a, const Value& b, int line) {
    if (a.is_number() && b.is_number()) {
        if (a.is_int() && b.is_int()) return a.as_int() < b.as_int() ? -1 : a.as_int() > b.as_int() ? 1 : 0;
        return a.as_double() < b.as_double() ? -1 : a.as_double() > b.as_double() ? 1 : 0;
    }
    if (a.is_string() && b.is_string()) return a.as_string().compare(b.as_string()) < 0 ? -1 : a.as_string() == b.as_string() ? 0 : 1;
    if (a.is_list() && b.is_list()) {
        const List &x = a.as_list(), &y = b.as_list();
        for (size_t i = 0; i < x.size() && i < y.size(); ++i)
            if (!values_equal(x[i], y[i])) return values_compare(x[i], y[i], line);
        return x.size() < y.size() ? -1 : x.size() > y.size() ? 1 : 0;
    }
    fail("'<' is not supported between '" + a.type_name() + "' and '" + b.type_name() + "'", line);
}

namespace {

void dump(const Value& v, const DumpOptions& o, int level, int line, std::string& out) {
    const bool pretty = o.indent >= 0;
    auto newline = [&](int lvl) {
        if (pretty) out += "\n" + std::string(size_t(o.indent) * size_t(lvl), ' ');
    };
    switch (v.kind()) {
        case Value::Kind::kNone: out += "null"; return;
        case Value::Kind::kBool: out += v.as_bool() ? "true" : "false"; return;
        case Value::Kind::kInt: out += std::to_string(v.as_int()); return;
        case Value::Kind::kFloat: {
            const double d = v.as_double();
            out += std::isnan(d) ? "NaN" : std::isinf(d) ? (d > 0 ? "Infinity" : "-Infinity") : float_str(d);
            return;
        }
        case Value::Kind::kString: tok::python_json_dump_string(v.as_string(), out); return;
        case Value::Kind::kList: {
            const List& l = v.as_list();
            if (l.empty()) {
                out += "[]";
                return;
            }
            out.push_back('[');
            for (size_t i = 0; i < l.size(); ++i) {
                if (i) out += o.item_separator;
                newline(level + 1);
                dump(l[i], o, level + 1, line, out);
            }
            newline(level);
            out.push_back(']');
            return;
        }
        case Value::Kind::kDict: {
            if (v.as_dict().is_namespace) break;
            std::vector<const std::pair<std::string, Value>*> items;
            for (const auto& e : v.as_dict().entries) items.push_back(&e);
            if (o.sort_keys)
                std::stable_sort(items.begin(), items.end(), [](auto* a, auto* b) { return a->first < b->first; });
            if (items.empty()) {
                out += "{}";
                return;
            }
            out.push_back('{');
            for (size_t i = 0; i < items.size(); ++i) {
                if (i) out += o.item_separator;
                newline(level + 1);
                tok::python_json_dump_string(items[i]->first, out);
                out += o.key_separator;
                dump(items[i]->second, o, level + 1, line, out);
            }
            newline(level);
            out.push_back('}');
            return;
        }
        default: break;
    }
    fail("tojson: an object of type " + v.type_name() + " is not JSON serializable", line);
}

// Code point boundaries of a UTF-8 string (invalid bytes count as one code point each).
std::vector<std::pair<size_t, uint32_t>> code_points(const std::string& s) {
    std::vector<std::pair<size_t, uint32_t>> cps;
    for (size_t i = 0; i < s.size();) {
        const size_t len = tok::utf8_valid_length(s, i);
        cps.emplace_back(i, len ? tok::utf8_decode_at(s, i, len) : 0xFFFFFFFFu);
        i += len ? len : 1;
    }
    return cps;
}

}  // namespace

std::string json_dumps(const Value& value, const DumpOptions& options, int line) {
    std::string out;
    dump(value, options, 0, line, out);
    return out;
}

std::string py_percent_format(const std::string& format, const Value& args, int line) {
    const List items = args.is_tuple() ? args.as_list() : List{args};
    size_t next = 0;
    std::string out;
    for (size_t i = 0; i < format.size(); ++i) {
        if (format[i] != '%') {
            out.push_back(format[i]);
            continue;
        }
        if (++i >= format.size()) fail("'%' formatting: incomplete format", line);
        if (format[i] == '%') {
            out.push_back('%');
            continue;
        }
        int precision = -1;
        if (format[i] == '.') {
            precision = 0;
            while (++i < format.size() && format[i] >= '0' && format[i] <= '9') precision = precision * 10 + (format[i] - '0');
            if (i >= format.size()) fail("'%' formatting: incomplete format", line);
        }
        const char conv = format[i];
        if (next >= items.size()) fail("'%' formatting: not enough arguments for the format string", line);
        const Value& v = items[next++];
        if (conv == 's') {
            out += v.str();
        } else if (conv == 'r') {
            out += v.repr();
        } else if (conv == 'd' || conv == 'i' || conv == 'f') {
            if (!v.is_number()) fail(std::string("'%' formatting: %") + conv + " needs a number, not " + v.type_name(), line);
            if (conv == 'f') {
                char buf[512];
                std::snprintf(buf, sizeof buf, "%.*f", precision < 0 ? 6 : precision, v.as_double());
                out += buf;
            } else {
                out += std::to_string(v.is_int() ? v.as_int() : int64_t(v.as_double()));
            }
        } else {
            fail(std::string("'%' formatting: unsupported conversion '%") + conv + "'", line);
        }
    }
    if (next < items.size()) fail("'%' formatting: not all arguments converted", line);
    return out;
}

std::string py_strip(const std::string& s, bool left, bool right, const Value* chars) {
    std::vector<uint32_t> set;
    const bool custom = chars && !chars->is_none() && !chars->is_undefined();
    if (custom)
        for (const auto& [pos, cp] : code_points(chars->str())) set.push_back(cp);
    auto strip_it = [&](uint32_t cp) {
        return custom ? std::find(set.begin(), set.end(), cp) != set.end() : tok::python_isspace(cp);
    };
    const auto cps = code_points(s);
    size_t b = 0, e = cps.size();
    if (left)
        while (b < e && strip_it(cps[b].second)) ++b;
    if (right)
        while (e > b && strip_it(cps[e - 1].second)) --e;
    const size_t begin = b < cps.size() ? cps[b].first : s.size();
    const size_t end = e < cps.size() ? cps[e].first : s.size();
    return s.substr(begin, end - begin);
}

}  // namespace qs::jinja

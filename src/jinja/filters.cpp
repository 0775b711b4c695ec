// Filters and tests (see builtins.h), as the jinja2 3.1 documentation defines them; `tojson`
// as transformers defines it. An unknown filter or test is an error naming it.
#include <algorithm>
#include <cmath>
#include <map>

#include "jinja/builtins.h"
#include "jinja/interpreter.h"
#include "jinja/text.h"

namespace qs::jinja {

namespace {

bool kw_bool(const CallArgs& a, size_t i, const std::string& name, bool fallback) {
    const Value* v = a.get(i, name);
    return v ? v->truthy() : fallback;
}

// `attribute` arguments may be dotted ("function.name"); integer parts index lists.
Value attribute_of(const Value& item, const Value& attribute, int line) {
    if (attribute.is_int()) return get_item(item, attribute, line);
    Value v = item;
    const std::string path = attribute.str();
    size_t start = 0;
    while (true) {
        const size_t dot = path.find('.', start);
        const std::string part = path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
        if (v.is_undefined()) return v;
        const bool digits = !part.empty() && std::all_of(part.begin(), part.end(), [](char c) { return c >= '0' && c <= '9'; });
        v = digits ? get_item(v, Value(int64_t(std::stoll(part))), line) : get_item(v, Value(part), line);
        if (dot == std::string::npos) return v;
        start = dot + 1;
    }
}

// The (test name, its arguments) of select/reject(attr) calls, starting at positional[first].
bool run_test(const CallArgs& a, size_t first, const Value& v) {
    if (a.positional.size() <= first) return v.truthy();
    const Value& name = a.positional[first];
    if (!name.is_string()) fail("select/reject: the test name must be a string", a.line);
    CallArgs targs;
    targs.line = a.line;
    targs.positional.assign(a.positional.begin() + long(first) + 1, a.positional.end());
    if (!has_test(name.as_string())) fail("unsupported test '" + name.as_string() + "'", a.line);
    return apply_test(name.as_string(), v, targs);
}

std::string html_escape(const std::string& s) {
    std::string out;
    for (char c : s) {
        switch (c) {
            case '&': out += "&amp;"; break;
            case '<': out += "&lt;"; break;
            case '>': out += "&gt;"; break;
            case '"': out += "&#34;"; break;
            case '\'': out += "&#39;"; break;
            default: out.push_back(c);
        }
    }
    return out;
}

Value to_int(const Value& v, const Value& fallback) {
    if (v.is_int()) return Value(v.as_int());
    if (v.kind() == Value::Kind::kFloat) {
        const double d = v.as_double();
        return std::isfinite(d) ? Value(int64_t(d)) : fallback;
    }
    if (v.is_string()) {
        std::string s = py_strip(v.as_string(), true, true);
        s.erase(std::remove(s.begin(), s.end(), '_'), s.end());
        try {
            size_t used = 0;
            const long long i = std::stoll(s, &used, 10);
            if (used == s.size()) return Value(int64_t(i));
            const double d = std::stod(s, &used);
            if (used == s.size() && std::isfinite(d)) return Value(int64_t(d));
        } catch (const std::exception&) {
        }
    }
    return fallback;
}

Value to_float(const Value& v, const Value& fallback) {
    if (v.is_number()) return Value(v.as_double());
    if (v.is_string()) {
        const std::string s = py_strip(v.as_string(), true, true);
        try {
            size_t used = 0;
            const double d = std::stod(s, &used);
            if (used == s.size()) return Value(d);
        } catch (const std::exception&) {
        }
    }
    return fallback;
}

std::string indent(const std::string& text, const Value& width, bool first, bool blank) {
    const std::string pad = width.is_string() ? width.as_string() : std::string(size_t(std::max<int64_t>(0, width.as_int())), ' ');
    const std::vector<std::string> lines = py_splitlines(text + "\n");
    std::string out;
    for (size_t i = 0; i < lines.size(); ++i) {
        if (i) out += "\n";
        if (i > 0 && (blank || !lines[i].empty())) out += pad;
        out += lines[i];
    }
    return first ? pad + out : out;
}

// Keys for sort/unique/min/max: the item or its attribute, lower-cased unless case_sensitive.
Value sort_key(const Value& item, const Value* attribute, bool case_sensitive, int line) {
    Value k = attribute && !attribute->is_none() ? attribute_of(item, *attribute, line) : item;
    if (!case_sensitive && k.is_string()) return Value(py_lower(k.as_string()));
    return k;
}

}  // namespace

Value apply_filter(const std::string& name, const Value& v, CallArgs& a, Interpreter& interp) {
    const int line = a.line;
    auto need_string = [&]() -> const std::string& {
        if (!v.is_string()) fail("filter '" + name + "' expects a string, got '" + v.type_name() + "'", line);
        return v.as_string();
    };
    if (name == "safe" || name == "string") return Value(v.str());
    if (name == "trim") return Value(py_strip(v.str(), true, true, a.get(0, "chars")));
    if (name == "upper") return Value(py_upper(v.str()));
    if (name == "lower") return Value(py_lower(v.str()));
    if (name == "capitalize") return Value(py_capitalize(v.str()));
    if (name == "title") {
        // jinja2's title: words split on whitespace and - ( { [ <, each capitalized.
        std::string out, word;
        auto flush = [&] {
            out += py_capitalize(word, true);
            word.clear();
        };
        for (const std::string& c : code_point_strings(v.str())) {
            const bool sep = c == "-" || c == "(" || c == "{" || c == "[" || c == "<" ||
                             (py_strip(c, true, true).empty());
            if (sep) {
                flush();
                out += c;
            } else {
                word += c;
            }
        }
        flush();
        return Value(out);
    }
    if (name == "length" || name == "count") return Value(length_of(v, line));
    if (name == "tojson") {
        DumpOptions o;
        if (kw_bool(a, 0, "ensure_ascii", false)) fail("tojson(ensure_ascii=True) is not supported", line);
        if (const Value* ind = a.get(1, "indent"); ind && !ind->is_none()) {
            if (!ind->is_int()) fail("tojson: indent must be an integer", line);
            o.indent = int(ind->as_int());
            o.item_separator = ",";
        }
        if (const Value* sep = a.get(2, "separators"); sep && !sep->is_none()) {
            if (!sep->is_list() || sep->as_list().size() != 2) fail("tojson: separators must be a pair", line);
            o.item_separator = sep->as_list()[0].str();
            o.key_separator = sep->as_list()[1].str();
        }
        o.sort_keys = kw_bool(a, 3, "sort_keys", false);
        return Value(json_dumps(v, o, line));
    }
    if (name == "default" || name == "d") {
        const Value* dflt = a.get(0, "default_value");
        const bool boolean = kw_bool(a, 1, "boolean", false);
        if (v.is_undefined() || (boolean && !v.truthy())) return dflt ? *dflt : Value("");
        return v;
    }
    if (name == "first" || name == "last") {
        const List items = iterate(v, line);
        if (items.empty()) return Value::undefined(name + " of an empty sequence");
        return name == "first" ? items.front() : items.back();
    }
    if (name == "list") return Value(iterate(v, line));
    if (name == "items") {
        if (v.is_undefined()) return Value(List{});
        if (!v.is_dict()) fail("filter 'items' expects a mapping, got '" + v.type_name() + "'", line);
        List l;
        for (const auto& [k, x] : v.as_dict().entries) l.push_back(Value::tuple(List{Value(k), x}));
        return Value(std::move(l));
    }
    if (name == "dictsort") {
        if (!v.is_dict()) fail("filter 'dictsort' expects a mapping", line);
        const bool cs = kw_bool(a, 0, "case_sensitive", false);
        const Value* by = a.get(1, "by");
        const bool by_value = by && by->str() == "value";
        const bool rev = kw_bool(a, 2, "reverse", false);
        List l;
        for (const auto& [k, x] : v.as_dict().entries) l.push_back(Value::tuple(List{Value(k), x}));
        std::stable_sort(l.begin(), l.end(), [&](const Value& p, const Value& q) {
            const Value kp = sort_key(p.as_list()[by_value ? 1 : 0], nullptr, cs, line);
            const Value kq = sort_key(q.as_list()[by_value ? 1 : 0], nullptr, cs, line);
            return rev ? values_compare(kq, kp, line) < 0 : values_compare(kp, kq, line) < 0;
        });
        return Value(std::move(l));
    }
    if (name == "join") {
        const Value* sep = a.get(0, "d");
        const Value* attr = a.get(1, "attribute");
        std::string out;
        bool first = true;
        for (const Value& x : iterate(v, line)) {
            if (!first) out += sep ? sep->str() : "";
            out += (attr && !attr->is_none() ? attribute_of(x, *attr, line) : x).str();
            first = false;
        }
        return Value(std::move(out));
    }
    if (name == "replace") {
        const Value* from = a.get(0, "old");
        const Value* to = a.get(1, "new");
        if (!from || !to) fail("filter 'replace' takes old and new", line);
        const Value* count = a.get(2, "count");
        return Value(py_replace(v.str(), from->str(), to->str(), count && count->is_int() ? count->as_int() : -1));
    }
    if (name == "int") {
        const Value* d = a.get(0, "default");
        return to_int(v, d ? *d : Value(int64_t{0}));
    }
    if (name == "float") {
        const Value* d = a.get(0, "default");
        return to_float(v, d ? *d : Value(0.0));
    }
    if (name == "abs") {
        if (!v.is_number()) fail("filter 'abs' expects a number", line);
        return v.is_int() ? Value(v.as_int() < 0 ? -v.as_int() : v.as_int()) : Value(std::fabs(v.as_double()));
    }
    if (name == "round") {
        if (!v.is_number()) fail("filter 'round' expects a number", line);
        const Value* prec = a.get(0, "precision");
        const Value* method = a.get(1, "method");
        const double scale = std::pow(10.0, prec && prec->is_int() ? double(prec->as_int()) : 0.0);
        const std::string m = method ? method->str() : "common";
        const double x = v.as_double() * scale;
        // Python's round(): halves to even.
        const double r = m == "ceil" ? std::ceil(x) : m == "floor" ? std::floor(x) : std::nearbyint(x);
        return Value(r / scale);
    }
    if (name == "reverse") {
        if (v.is_string()) {
            auto cps = code_point_strings(v.as_string());
            std::string out;
            for (auto it = cps.rbegin(); it != cps.rend(); ++it) out += *it;
            return Value(out);
        }
        List l = iterate(v, line);
        std::reverse(l.begin(), l.end());
        return Value(std::move(l));
    }
    if (name == "escape" || name == "e") return Value(html_escape(v.str()));
    if (name == "indent") {
        const Value* width = a.get(0, "width");
        return Value(indent(v.str(), width ? *width : Value(int64_t{4}), kw_bool(a, 1, "first", false),
                            kw_bool(a, 2, "blank", false)));
    }
    if (name == "map") {
        List out;
        const Value* attr = nullptr;
        for (const auto& [k, x] : a.keyword)
            if (k == "attribute") attr = &x;
        if (attr) {
            const Value* dflt = nullptr;
            for (const auto& [k, x] : a.keyword)
                if (k == "default") dflt = &x;
            for (const Value& x : iterate(v, line)) {
                Value r = attribute_of(x, *attr, line);
                out.push_back(r.is_undefined() && dflt ? *dflt : r);
            }
            return Value(std::move(out));
        }
        if (a.positional.empty() || !a.positional[0].is_string()) fail("map() takes a filter name or attribute=", line);
        CallArgs fargs;
        fargs.line = line;
        fargs.positional.assign(a.positional.begin() + 1, a.positional.end());
        fargs.keyword = a.keyword;
        for (const Value& x : iterate(v, line)) out.push_back(interp.call_filter(a.positional[0].as_string(), x, fargs));
        return Value(std::move(out));
    }
    if (name == "select" || name == "reject") {
        List out;
        for (const Value& x : iterate(v, line))
            if (run_test(a, 0, x) == (name == "select")) out.push_back(x);
        return Value(std::move(out));
    }
    if (name == "selectattr" || name == "rejectattr") {
        if (a.positional.empty()) fail(name + "() takes an attribute name", line);
        List out;
        for (const Value& x : iterate(v, line))
            if (run_test(a, 1, attribute_of(x, a.positional[0], line)) == (name == "selectattr")) out.push_back(x);
        return Value(std::move(out));
    }
    if (name == "attr") {
        const Value* n = a.get(0, "name");
        if (!n || !n->is_string()) fail("attr() takes an attribute name", line);
        return get_attr(v, n->as_string(), line);
    }
    if (name == "sort" || name == "unique" || name == "min" || name == "max") {
        const bool rev = name == "sort" && kw_bool(a, 0, "reverse", false);
        const bool cs = kw_bool(a, name == "sort" ? 1 : 0, "case_sensitive", false);
        const Value* attr = a.get(name == "sort" ? 2 : 1, "attribute");
        List l = iterate(v, line);
        if (name == "unique") {
            List out, keys;
            for (const Value& x : l) {
                const Value k = sort_key(x, attr, cs, line);
                if (std::none_of(keys.begin(), keys.end(), [&](const Value& y) { return values_equal(y, k); })) {
                    keys.push_back(k);
                    out.push_back(x);
                }
            }
            return Value(std::move(out));
        }
        std::stable_sort(l.begin(), l.end(), [&](const Value& p, const Value& q) {
            const Value kp = sort_key(p, attr, cs, line), kq = sort_key(q, attr, cs, line);
            return rev ? values_compare(kq, kp, line) < 0 : values_compare(kp, kq, line) < 0;
        });
        if (name == "sort") return Value(std::move(l));
        if (l.empty()) return Value::undefined(name + " of an empty sequence");
        return name == "min" ? l.front() : l.back();
    }
    if (name == "sum") {
        const Value* attr = a.get(0, "attribute");
        const Value* start = a.get(1, "start");
        Value total = start ? *start : Value(int64_t{0});
        for (const Value& x : iterate(v, line)) {
            const Value y = attr && !attr->is_none() ? attribute_of(x, *attr, line) : x;
            if (!total.is_number() || !y.is_number()) fail("sum(): items must be numbers", line);
            total = total.is_int() && y.is_int() ? Value(total.as_int() + y.as_int()) : Value(total.as_double() + y.as_double());
        }
        return total;
    }
    if (name == "center") {
        const Value* w = a.get(0, "width");
        const int64_t width = w && w->is_int() ? w->as_int() : 80;
        const std::string text = v.str();
        const int64_t len = int64_t(code_point_strings(text).size());
        if (len >= width) return Value(text);
        // CPython's str.center: an odd margin puts the extra space left when the width is odd.
        const int64_t total = width - len;
        const int64_t left = total / 2 + (total & width & 1);
        return Value(std::string(size_t(left), ' ') + text + std::string(size_t(total - left), ' '));
    }
    if (name == "format") {
        if (!a.keyword.empty()) fail("filter 'format' takes positional arguments only", line);
        return Value(py_percent_format(need_string(), Value::tuple(a.positional), line));
    }
    if (name == "wordcount") return Value(int64_t(py_split(need_string(), nullptr, -1).size()));
    fail("unsupported filter '" + name + "'", line);
}

bool has_test(const std::string& name) {
    static const char* const kTests[] = {
        "defined", "undefined", "none",  "boolean", "false",   "true",     "integer",  "float",  "number",
        "string",  "mapping",   "iterable", "sequence", "callable", "sameas", "eq",     "equalto", "==",
        "ne",      "!=",        "lt",    "lessthan", "<",      "le",       "<=",       "gt",     "greaterthan",
        ">",       "ge",        ">=",    "in",      "lower",   "upper",    "odd",      "even",   "divisibleby",
        "escaped"};
    return std::any_of(std::begin(kTests), std::end(kTests), [&](const char* t) { return name == t; });
}

bool apply_test(const std::string& name, const Value& v, CallArgs& a) {
    const int line = a.line;
    auto arg = [&]() -> const Value& {
        if (a.positional.empty()) fail("test '" + name + "' takes an argument", line);
        return a.positional[0];
    };
    using K = Value::Kind;
    if (name == "defined") return !v.is_undefined();
    if (name == "undefined") return v.is_undefined();
    if (name == "none") return v.is_none();
    if (name == "boolean") return v.is_bool();
    if (name == "false") return v.is_bool() && !v.as_bool();
    if (name == "true") return v.is_bool() && v.as_bool();
    if (name == "integer") return v.kind() == K::kInt;
    if (name == "float") return v.kind() == K::kFloat;
    if (name == "number") return v.is_number();
    if (name == "string") return v.is_string();
    if (name == "mapping") return v.is_dict() && !v.as_dict().is_namespace;
    if (name == "iterable" || name == "sequence") return v.is_string() || v.is_list() || v.is_dict() || v.is_undefined();
    if (name == "callable") return v.is_callable();
    if (name == "escaped") return false;
    if (name == "sameas") return v.same_as(arg());
    if (name == "eq" || name == "equalto" || name == "==") return values_equal(v, arg());
    if (name == "ne" || name == "!=") return !values_equal(v, arg());
    if (name == "lt" || name == "lessthan" || name == "<") return values_compare(v, arg(), line) < 0;
    if (name == "le" || name == "<=") return values_compare(v, arg(), line) <= 0;
    if (name == "gt" || name == "greaterthan" || name == ">") return values_compare(v, arg(), line) > 0;
    if (name == "ge" || name == ">=") return values_compare(v, arg(), line) >= 0;
    if (name == "in") {
        const Value& c = arg();
        if (c.is_string()) return v.is_string() && c.as_string().find(v.as_string()) != std::string::npos;
        if (c.is_dict()) return v.is_string() && c.as_dict().find(v.as_string());
        for (const Value& x : iterate(c, line))
            if (values_equal(x, v)) return true;
        return false;
    }
    if (name == "lower") return v.is_string() && py_lower(v.as_string()) == v.as_string();
    if (name == "upper") return v.is_string() && py_upper(v.as_string()) == v.as_string();
    if (name == "odd" || name == "even" || name == "divisibleby") {
        if (!v.is_int()) fail("test '" + name + "' expects an integer", line);
        const int64_t d = name == "divisibleby" ? (arg().is_int() ? arg().as_int() : 0) : 2;
        if (d == 0) fail("divisibleby: division by zero", line);
        const bool div = v.as_int() % d == 0;
        return name == "odd" ? !div : div;
    }
    fail("unsupported test '" + name + "'", line);
}

}  // namespace qs::jinja

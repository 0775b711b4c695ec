// Attribute and item access, slicing, iteration and the methods of str/dict/list values
// (see builtins.h). Mutating methods (list.append, dict.update, ...) are refused, as in the
// ImmutableSandboxedEnvironment transformers renders with.
#include <algorithm>

#include "jinja/builtins.h"
#include "jinja/text.h"

namespace qs::jinja {

namespace {

const std::string& str_arg(const CallArgs& a, size_t i, const std::string& name, const std::string& method) {
    const Value* v = a.get(i, name);
    if (!v || !v->is_string()) fail(method + "() takes a string argument", a.line);
    return v->as_string();
}

int64_t int_arg(const CallArgs& a, size_t i, const std::string& name, int64_t fallback) {
    const Value* v = a.get(i, name);
    if (!v || v->is_none()) return fallback;
    if (!v->is_int()) fail("expected an integer argument '" + name + "'", a.line);
    return v->as_int();
}

Value string_list(const std::vector<std::string>& parts) {
    List l;
    for (const auto& p : parts) l.emplace_back(p);
    return Value(std::move(l));
}

// Strings or a list of strings (startswith/endswith take a tuple).
bool affix_match(const std::string& s, const Value& affix, bool prefix, int line) {
    auto one = [&](const Value& a) {
        if (!a.is_string()) fail("startswith/endswith take a string or a list of strings", line);
        const std::string& x = a.as_string();
        if (x.size() > s.size()) return false;
        return prefix ? s.compare(0, x.size(), x) == 0 : s.compare(s.size() - x.size(), x.size(), x) == 0;
    };
    if (affix.is_list()) {
        for (const Value& a : affix.as_list())
            if (one(a)) return true;
        return false;
    }
    return one(affix);
}

Value string_method(const Value& self, const std::string& name, int line) {
    const std::string s = self.as_string();
    auto method = [&](auto fn) { return Value::callable(fn, "str." + name); };
    if (name == "startswith" || name == "endswith")
        return method([s, prefix = name == "startswith"](CallArgs& a) {
            const Value* x = a.get(0, "prefix");
            if (!x) fail("startswith/endswith need an argument", a.line);
            return Value(affix_match(s, *x, prefix, a.line));
        });
    if (name == "strip" || name == "lstrip" || name == "rstrip")
        return method([s, name](CallArgs& a) {
            return Value(py_strip(s, name != "rstrip", name != "lstrip", a.get(0, "chars")));
        });
    if (name == "lower") return method([s](CallArgs&) { return Value(py_lower(s)); });
    if (name == "upper") return method([s](CallArgs&) { return Value(py_upper(s)); });
    if (name == "title") return method([s](CallArgs&) { return Value(py_title(s)); });
    if (name == "capitalize") return method([s](CallArgs&) { return Value(py_capitalize(s)); });
    if (name == "split" || name == "rsplit")
        return method([s, name](CallArgs& a) {
            const Value* sep = a.get(0, "sep");
            const std::string* sp = sep && sep->is_string() ? &sep->as_string() : nullptr;
            if (sp && sp->empty()) fail("split(): empty separator", a.line);
            const int64_t maxsplit = int_arg(a, 1, "maxsplit", -1);
            return string_list(name == "split" ? py_split(s, sp, maxsplit) : py_rsplit(s, sp, maxsplit));
        });
    if (name == "splitlines") return method([s](CallArgs&) { return string_list(py_splitlines(s)); });
    if (name == "replace")
        return method([s](CallArgs& a) {
            return Value(py_replace(s, str_arg(a, 0, "old", "replace"), str_arg(a, 1, "new", "replace"),
                                    int_arg(a, 2, "count", -1)));
        });
    if (name == "find" || name == "rfind" || name == "count" || name == "index")
        return method([s, name](CallArgs& a) -> Value {
            const std::string& x = str_arg(a, 0, "sub", name);
            if (name == "count") {
                if (x.empty()) return Value(int64_t(code_point_strings(s).size() + 1));
                int64_t n = 0;
                for (size_t at = s.find(x); at != std::string::npos; at = s.find(x, at + x.size())) ++n;
                return Value(n);
            }
            const size_t at = name == "rfind" ? s.rfind(x) : s.find(x);
            if (at == std::string::npos) {
                if (name == "index") fail("substring not found", a.line);
                return Value(int64_t{-1});
            }
            return Value(int64_t(code_point_strings(s.substr(0, at)).size()));
        });
    if (name == "join")
        return method([s](CallArgs& a) {
            const Value* items = a.get(0, "iterable");
            if (!items) fail("join() takes an iterable", a.line);
            std::string out;
            bool first = true;
            for (const Value& v : iterate(*items, a.line)) {
                if (!v.is_string()) fail("str.join(): expected str items, found '" + v.type_name() + "'", a.line);
                if (!first) out += s;
                out += v.as_string();
                first = false;
            }
            return Value(std::move(out));
        });
    if (name == "isdigit" || name == "isspace" || name == "isalpha" || name == "isalnum" || name == "islower" ||
        name == "isupper")
        return method([s, name](CallArgs&) {
            if (s.empty()) return Value(false);
            if (name == "islower" || name == "isupper") {
                const bool lower = name == "islower";
                bool cased = false;
                for (const std::string& c : code_point_strings(s)) {
                    if (py_lower(c) != py_upper(c)) {
                        cased = true;
                        if ((lower ? py_lower(c) : py_upper(c)) != c) return Value(false);
                    }
                }
                return Value(cased);
            }
            for (unsigned char c : s) {
                const bool ok = name == "isdigit"   ? (c >= '0' && c <= '9')
                                : name == "isspace" ? (c == ' ' || (c >= 9 && c <= 13))
                                : name == "isalpha" ? std::isalpha(c) != 0
                                                    : std::isalnum(c) != 0;
                if (!ok) return Value(false);
            }
            return Value(true);
        });
    if (name == "removeprefix" || name == "removesuffix")
        return method([s, name](CallArgs& a) {
            const std::string& x = str_arg(a, 0, "affix", name);
            const bool prefix = name == "removeprefix";
            if (!affix_match(s, Value(x), prefix, a.line)) return Value(s);
            return Value(prefix ? s.substr(x.size()) : s.substr(0, s.size() - x.size()));
        });
    static const char* const kUnsupported[] = {"format", "format_map", "zfill", "center", "ljust", "rjust",
                                               "partition", "rpartition", "casefold", "swapcase", "expandtabs",
                                               "encode", "translate", "maketrans", "istitle", "isnumeric",
                                               "isdecimal", "isidentifier", "isprintable", "isascii"};
    for (const char* u : kUnsupported)
        if (name == u)
            return Value::callable([name](CallArgs& a) -> Value { fail("unsupported string method '" + name + "'", a.line); },
                                   "str." + name);
    (void)line;
    return Value::undefined("str." + name);
}

Value dict_method(const Value& self, const std::string& name) {
    auto method = [&](auto fn) { return Value::callable(fn, "dict." + name); };
    if (name == "items")
        return method([self](CallArgs&) {
            List l;
            for (const auto& [k, v] : self.as_dict().entries) l.push_back(Value::tuple(List{Value(k), v}));
            return Value(std::move(l));
        });
    if (name == "keys")
        return method([self](CallArgs&) {
            List l;
            for (const auto& e : self.as_dict().entries) l.emplace_back(e.first);
            return Value(std::move(l));
        });
    if (name == "values")
        return method([self](CallArgs&) {
            List l;
            for (const auto& e : self.as_dict().entries) l.push_back(e.second);
            return Value(std::move(l));
        });
    if (name == "get")
        return method([self](CallArgs& a) {
            const Value* k = a.get(0, "key");
            if (!k) fail("dict.get() takes a key", a.line);
            const Value* v = k->is_string() ? self.as_dict().find(k->as_string()) : nullptr;
            if (v) return *v;
            const Value* d = a.get(1, "default");
            return d ? *d : Value::none();
        });
    return Value();
}

Value list_method(const Value& self, const std::string& name) {
    if (name == "index" || name == "count")
        return Value::callable(
            [self, name](CallArgs& a) {
                const Value* x = a.get(0, "value");
                if (!x) fail("list." + name + "() takes a value", a.line);
                int64_t n = 0;
                const List& l = self.as_list();
                for (size_t i = 0; i < l.size(); ++i) {
                    if (!values_equal(l[i], *x)) continue;
                    if (name == "index") return Value(int64_t(i));
                    ++n;
                }
                if (name == "index") fail("list.index(x): x not in list", a.line);
                return Value(n);
            },
            "list." + name);
    return Value();
}

bool is_mutating(const std::string& name) {
    static const char* const kNames[] = {"append", "extend", "insert", "pop", "remove", "clear", "sort",
                                         "reverse", "update", "setdefault", "popitem", "add", "discard"};
    for (const char* n : kNames)
        if (name == n) return true;
    return false;
}

int64_t normalize_index(int64_t i, int64_t n) { return i < 0 ? i + n : i; }

}  // namespace

Value get_attr(const Value& obj, const std::string& name, int line) {
    if (obj.is_undefined())
        fail("'" + obj.undefined_hint() + "' is undefined (reading its attribute '" + name + "')", line);
    if ((obj.is_list() || (obj.is_dict() && !obj.as_dict().is_namespace)) && is_mutating(name))
        fail("access to attribute '" + name + "' of a '" + obj.type_name() +
                 "' object is unsafe (the template environment is immutable)",
             line);
    if (obj.is_dict()) {
        if (!obj.as_dict().is_namespace) {
            Value m = dict_method(obj, name);
            if (m.is_callable()) return m;
        }
        if (const Value* v = obj.as_dict().find(name)) return *v;
        return Value::undefined(name);
    }
    if (obj.is_string()) return string_method(obj, name, line);
    if (obj.is_list()) {
        Value m = list_method(obj, name);
        if (m.is_callable()) return m;
    }
    return Value::undefined(name);
}

Value get_item(const Value& obj, const Value& key, int line) {
    if (obj.is_undefined())
        fail("'" + obj.undefined_hint() + "' is undefined (reading the item " + key.repr() + ")", line);
    if (obj.is_dict()) {
        if (key.is_string()) {
            if (const Value* v = obj.as_dict().find(key.as_string())) return *v;
            return get_attr(obj, key.as_string(), line);
        }
        return Value::undefined(key.repr());
    }
    if ((obj.is_list() || obj.is_string()) && key.is_int()) {
        if (obj.is_list()) {
            const int64_t n = int64_t(obj.as_list().size());
            const int64_t i = normalize_index(key.as_int(), n);
            return i >= 0 && i < n ? obj.as_list()[size_t(i)] : Value::undefined("index " + key.repr());
        }
        const auto cps = code_point_strings(obj.as_string());
        const int64_t i = normalize_index(key.as_int(), int64_t(cps.size()));
        return i >= 0 && i < int64_t(cps.size()) ? Value(cps[size_t(i)]) : Value::undefined("index " + key.repr());
    }
    if (key.is_string()) return get_attr(obj, key.as_string(), line);
    return Value::undefined(key.repr());
}

Value get_slice(const Value& obj, const Value& start, const Value& stop, const Value& step, int line) {
    if (obj.is_undefined()) fail("'" + obj.undefined_hint() + "' is undefined (sliced)", line);
    List items;
    if (obj.is_list()) items = obj.as_list();
    else if (obj.is_string())
        for (auto& c : code_point_strings(obj.as_string())) items.emplace_back(std::move(c));
    else fail("'" + obj.type_name() + "' object cannot be sliced", line);
    auto as_opt = [&](const Value& v, const char* what) -> std::optional<int64_t> {
        if (v.is_none() || v.is_undefined()) return std::nullopt;
        if (!v.is_int()) fail(std::string("slice ") + what + " must be an integer", line);
        return v.as_int();
    };
    const int64_t n = int64_t(items.size());
    const int64_t st = as_opt(step, "step").value_or(1);
    if (st == 0) fail("slice step cannot be zero", line);
    auto clamp = [&](std::optional<int64_t> v, int64_t dflt) {
        if (!v) return dflt;
        int64_t i = *v < 0 ? *v + n : *v;
        if (st > 0) return std::clamp<int64_t>(i, 0, n);
        return std::clamp<int64_t>(i, -1, n - 1);
    };
    const int64_t b = clamp(as_opt(start, "start"), st > 0 ? 0 : n - 1);
    const int64_t e = clamp(as_opt(stop, "stop"), st > 0 ? n : -1);
    List out;
    for (int64_t i = b; st > 0 ? i < e : i > e; i += st) out.push_back(items[size_t(i)]);
    if (!obj.is_string()) return Value(std::move(out));
    std::string s;
    for (const Value& c : out) s += c.as_string();
    return Value(std::move(s));
}

List iterate(const Value& v, int line) {
    switch (v.kind()) {
        case Value::Kind::kUndefined: return {};
        case Value::Kind::kList: return v.as_list();
        case Value::Kind::kDict: {
            List keys;
            for (const auto& e : v.as_dict().entries) keys.emplace_back(e.first);
            return keys;
        }
        case Value::Kind::kString: {
            List chars;
            for (auto& c : code_point_strings(v.as_string())) chars.emplace_back(std::move(c));
            return chars;
        }
        default: fail("'" + v.type_name() + "' object is not iterable", line);
    }
}

int64_t length_of(const Value& v, int line) {
    switch (v.kind()) {
        case Value::Kind::kUndefined: return 0;
        case Value::Kind::kList: return int64_t(v.as_list().size());
        case Value::Kind::kDict: return int64_t(v.as_dict().entries.size());
        case Value::Kind::kString: return int64_t(code_point_strings(v.as_string()).size());
        default: fail("object of type '" + v.type_name() + "' has no len()", line);
    }
}

}  // namespace qs::jinja

// The values a Jinja template computes with, with Python's semantics as jinja2 gives them:
// undefined, None, bool, int, float, str, list, dict (insertion-ordered, string keys), and
// callables (macros, globals such as namespace() and range(), bound methods). Lists, dicts and
// namespaces are shared by reference, as Python objects are. Conversions from and to
// nlohmann::ordered_json bring in the request (messages, tools, kwargs). Values live inside one
// render on one thread; nothing here is shared between renders.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "jinja/error.h"

namespace qs::jinja {

class Value;
using List = std::vector<Value>;

// Insertion-ordered mapping with string keys (what JSON objects and template dicts hold).
struct Dict {
    std::vector<std::pair<std::string, Value>> entries;
    bool is_namespace = false;  // namespace(): attributes may be assigned ({% set ns.x = ... %})
    const Value* find(const std::string& key) const;
    void set(const std::string& key, Value value);
};

// Call arguments: positional, then keyword (in source order).
struct CallArgs {
    std::vector<Value> positional;
    std::vector<std::pair<std::string, Value>> keyword;
    int line = 0;
    // The keyword `name`, else positional[index], else null.
    const Value* get(size_t index, const std::string& name) const;
};

using Function = std::function<Value(CallArgs&)>;

class Value {
public:
    enum class Kind { kUndefined, kNone, kBool, kInt, kFloat, kString, kList, kDict, kCallable };

    Value() = default;  // undefined
    static Value none() { Value v; v.data_ = std::monostate{}; v.kind_ = Kind::kNone; return v; }
    Value(bool b) : kind_(Kind::kBool), data_(b) {}
    Value(int64_t i) : kind_(Kind::kInt), data_(i) {}
    Value(int i) : Value(int64_t{i}) {}
    Value(double d) : kind_(Kind::kFloat), data_(d) {}
    Value(std::string s) : kind_(Kind::kString), data_(std::make_shared<const std::string>(std::move(s))) {}
    Value(const char* s) : Value(std::string(s)) {}
    Value(List l) : kind_(Kind::kList), data_(std::make_shared<List>(std::move(l))) {}
    Value(Dict d) : kind_(Kind::kDict), data_(std::make_shared<Dict>(std::move(d))) {}
    static Value callable(Function f, std::string name);
    // A tuple: a list that Python prints as (a, b) and that never equals a list.
    static Value tuple(List l) {
        Value v(std::move(l));
        v.tuple_ = true;
        return v;
    }
    // An undefined value that remembers what was looked up, for error messages.
    static Value undefined(std::string hint);

    Kind kind() const { return kind_; }
    bool is_undefined() const { return kind_ == Kind::kUndefined; }
    bool is_none() const { return kind_ == Kind::kNone; }
    bool is_bool() const { return kind_ == Kind::kBool; }
    bool is_int() const { return kind_ == Kind::kInt || kind_ == Kind::kBool; }  // Python: bool is an int
    bool is_number() const { return is_int() || kind_ == Kind::kFloat; }
    bool is_string() const { return kind_ == Kind::kString; }
    bool is_list() const { return kind_ == Kind::kList; }
    bool is_dict() const { return kind_ == Kind::kDict; }
    bool is_tuple() const { return tuple_; }
    bool is_callable() const { return kind_ == Kind::kCallable; }

    bool as_bool() const { return std::get<bool>(data_); }
    int64_t as_int() const { return kind_ == Kind::kBool ? int64_t(as_bool()) : std::get<int64_t>(data_); }
    double as_double() const { return kind_ == Kind::kFloat ? std::get<double>(data_) : double(as_int()); }
    const std::string& as_string() const { return *std::get<std::shared_ptr<const std::string>>(data_); }
    List& as_list() const { return *std::get<std::shared_ptr<List>>(data_); }
    Dict& as_dict() const { return *std::get<std::shared_ptr<Dict>>(data_); }
    Value call(CallArgs& args) const;
    const std::string& callable_name() const;
    const std::string& undefined_hint() const;

    // Python truth value.
    bool truthy() const;
    // Python type name ("str", "dict", "NoneType", ...) for error messages.
    std::string type_name() const;
    // str(value) as jinja prints it ({{ x }}): undefined prints nothing, None prints "None".
    std::string str() const;
    // repr(value): how Python prints a value inside a list or dict.
    std::string repr() const;
    // Same object (lists, dicts, callables) or equal scalars: jinja's `sameas`.
    bool same_as(const Value& other) const;

    static Value from_json(const nlohmann::ordered_json& j);

private:
    Kind kind_ = Kind::kUndefined;
    bool tuple_ = false;
    struct Callable {
        Function fn;
        std::string name;
    };
    std::variant<std::monostate, bool, int64_t, double, std::shared_ptr<const std::string>, std::shared_ptr<List>,
                 std::shared_ptr<Dict>, std::shared_ptr<Callable>>
        data_;
};

// Python ==, and <, <=, >, >= (a TemplateError when the types do not order).
bool values_equal(const Value& a, const Value& b);
int values_compare(const Value& a, const Value& b, int line);

// json.dumps(value, ensure_ascii=False, indent=indent, separators=..., sort_keys=...) as
// transformers' `tojson` filter calls it. indent < 0: no newlines.
struct DumpOptions {
    int indent = -1;
    std::string item_separator = ", ";
    std::string key_separator = ": ";
    bool sort_keys = false;
};
std::string json_dumps(const Value& value, const DumpOptions& options, int line);

// Python's printf-style `format % args` for %s, %r, %d, %i, %f (with an optional precision) and
// %%: args is one value or a tuple. Other conversions are a TemplateError naming them.
std::string py_percent_format(const std::string& format, const Value& args, int line);

// Python str.strip/lstrip/rstrip: with no `chars`, Python's (Unicode) whitespace.
std::string py_strip(const std::string& s, bool left, bool right, const Value* chars = nullptr);

}  // namespace qs::jinja

// The built-in library the interpreter calls into: filters (`x | name(args)`), tests
// (`x is name args`), the methods templates call on strings, dicts and lists
// (`s.startswith(...)`, `d.items()`), attribute and item access with jinja2's rules, and
// iteration. Semantics are Python's and jinja2's (jinja2 3.1 documentation); `tojson` is
// transformers' (json.dumps, ensure_ascii=False). Errors throw TemplateError with the line.
#pragma once

#include <string>

#include "jinja/value.h"

namespace qs::jinja {

class Interpreter;

// `args.positional` excludes the subject. Unknown names are errors naming the filter/test.
Value apply_filter(const std::string& name, const Value& subject, CallArgs& args, Interpreter& interp);
bool apply_test(const std::string& name, const Value& subject, CallArgs& args);
bool has_test(const std::string& name);

// obj.name (jinja2: attribute first, then item) and obj[key] (item first, then attribute).
// A missing attribute or item is undefined; on an undefined object it is an error.
Value get_attr(const Value& obj, const std::string& name, int line);
Value get_item(const Value& obj, const Value& key, int line);
Value get_slice(const Value& obj, const Value& start, const Value& stop, const Value& step, int line);

// The items a for loop or filter walks: list elements, dict keys, string characters;
// undefined is empty; anything else is an error.
List iterate(const Value& v, int line);
// len(): code points of a string, entries of a list or dict.
int64_t length_of(const Value& v, int line);

}  // namespace qs::jinja

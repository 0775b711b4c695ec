// Python's text formatting as chat templates see it through jinja2 + transformers: json.dumps
// with ensure_ascii=False and ", " / ": " separators (transformers' `tojson`), str() of JSON
// scalars (True, None, float repr), and str.strip() with Python's whitespace set. Exact output
// matters: these strings go into prompts. Pure functions; any thread.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

namespace qs::tok {

using OrderedJson = nlohmann::ordered_json;

// Python repr() of a float: shortest round-trip digits; fixed notation for 1e-4 <= |x| < 1e16,
// else d.ddde+XX; always a '.0' or exponent so it reads back as a float.
std::string python_float_repr(double value);

// json.dumps(value, ensure_ascii=False) with default separators, keys in stored order.
std::string python_json_dumps(const OrderedJson& value);
// json.dumps of one string (ensure_ascii=False), quotes included, appended to `out`.
void python_json_dump_string(const std::string& s, std::string& out);

// str(value) for a JSON scalar (strings as they are); false for objects and arrays.
bool python_str(const OrderedJson& value, std::string& out);

// Python's str.isspace() for one code point.
bool python_isspace(uint32_t cp);

// str.strip() / lstrip() / rstrip() with no argument (Python whitespace).
std::string python_strip(std::string_view s);
// Strips the given ASCII characters only (str.strip(chars)).
std::string_view strip_chars(std::string_view s, std::string_view chars, bool left, bool right);

}  // namespace qs::tok

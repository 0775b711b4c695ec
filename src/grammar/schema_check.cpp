// unsupported_schema_feature (see schema_check.h). The keyword lists follow xgrammar 0.2.8's
// json_schema_converter.cc: what SchemaParser reads is enforced; "not", "if"/"then"/"else",
// "dependentRequired", "dependentSchemas", "uniqueItems", "contains", "minContains",
// "maxContains" are skipped silently, and draft-7 keywords it does not know ("dependencies",
// "additionalItems", "items" as an array) are ignored like any unknown key.
#include "grammar/schema_check.h"

#include <fmt/format.h>

#include <array>
#include <string_view>

namespace qs::grammar {

namespace {

using J = nlohmann::json;

constexpr std::array<std::string_view, 14> kIgnored = {
    "not",        "if",          "then",         "else",         "dependentRequired", "dependentSchemas",
    "uniqueItems", "contains",   "minContains",  "maxContains",  "dependencies",      "additionalItems",
    "$dynamicRef", "$recursiveRef"};

// Keywords whose value is one subschema, an array of them, or an object of them.
constexpr std::array<std::string_view, 5> kOne = {"additionalProperties", "items", "propertyNames",
                                                  "unevaluatedProperties", "unevaluatedItems"};
constexpr std::array<std::string_view, 4> kArray = {"anyOf", "oneOf", "allOf", "prefixItems"};
constexpr std::array<std::string_view, 4> kMap = {"properties", "patternProperties", "$defs", "definitions"};

std::string escape_pointer(const std::string& key) {
    std::string out;
    for (char c : key) out += c == '~' ? "~0" : c == '/' ? "~1" : std::string(1, c);
    return out;
}

std::optional<std::string> check(const J& s, const std::string& path, int depth) {
    if (!s.is_object() || depth > 64) return std::nullopt;
    for (std::string_view k : kIgnored)
        if (s.contains(std::string(k)))
            return fmt::format("keyword '{}' at {} is not supported", k, path.empty() ? "/" : path);
    if (auto it = s.find("items"); it != s.end() && it->is_array())
        return fmt::format("'items' as an array (draft-7 tuples) at {} is not supported; use 'prefixItems'",
                           path.empty() ? "/" : path);
    for (std::string_view k : kOne)
        if (auto it = s.find(std::string(k)); it != s.end())
            if (auto e = check(*it, path + "/" + std::string(k), depth + 1)) return e;
    for (std::string_view k : kArray)
        if (auto it = s.find(std::string(k)); it != s.end() && it->is_array())
            for (size_t i = 0; i < it->size(); ++i)
                if (auto e = check((*it)[i], fmt::format("{}/{}/{}", path, k, i), depth + 1)) return e;
    for (std::string_view k : kMap)
        if (auto it = s.find(std::string(k)); it != s.end() && it->is_object())
            for (auto p = it->begin(); p != it->end(); ++p)
                if (auto e = check(p.value(), path + "/" + std::string(k) + "/" + escape_pointer(p.key()), depth + 1))
                    return e;
    return std::nullopt;
}

}  // namespace

std::optional<std::string> unsupported_schema_feature(const J& schema) { return check(schema, "", 0); }

}  // namespace qs::grammar

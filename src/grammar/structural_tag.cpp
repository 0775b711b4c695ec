// Structural tags from requests (see structural_tag.h). The format itself is validated by
// xgrammar when the spec is compiled (its errors name the bad field); here only the shape of
// the envelope, the legacy conversion and the schemas inside.
#include "grammar/structural_tag.h"

#include <fmt/format.h>

#include "grammar/schema_check.h"

namespace qs::grammar {

namespace {

using J = nlohmann::ordered_json;

// Walks a format: every {"type": "json_schema", "json_schema": S} is checked and bounded.
Status check_formats(J& node, const std::string& path) {
    if (node.is_array()) {
        for (size_t i = 0; i < node.size(); ++i)
            QS_RETURN_IF_ERROR(check_formats(node[i], fmt::format("{}[{}]", path, i)));
        return Status::ok();
    }
    if (!node.is_object()) return Status::ok();
    // == compares types first (no throw on a non-string "type", as json::value would).
    if (node.contains("type") && node["type"] == "json_schema" && node.contains("json_schema")) {
        J& schema = node["json_schema"];
        if (schema.is_string()) {  // xgrammar takes the schema as an object or as JSON text
            J parsed = J::parse(schema.get<std::string>(), nullptr, false);
            if (parsed.is_discarded()) return invalid_argument(path + ".json_schema is not valid JSON");
            schema = std::move(parsed);
        }
        if (!schema.is_object() && !schema.is_boolean())
            return invalid_argument(path + ".json_schema must be a JSON schema (an object)");
        if (auto bad = unsupported_schema_feature(nlohmann::json::parse(schema.dump())))
            return invalid_argument(fmt::format("{}.json_schema uses a feature that is not supported: {}", path, *bad));
        if (!node.contains("max_whitespace_cnt")) node["max_whitespace_cnt"] = kMaxJsonWhitespace;
        return Status::ok();
    }
    for (auto it = node.begin(); it != node.end(); ++it)
        if (it->is_object() || it->is_array()) QS_RETURN_IF_ERROR(check_formats(*it, path + "." + it.key()));
    return Status::ok();
}

Result<J> from_legacy(const J& tag) {
    const J& structures = tag["structures"];
    if (!structures.is_array() || structures.empty())
        return invalid_argument("structures must be a non-empty array of {begin, schema, end}");
    const J* triggers = tag.contains("triggers") ? &tag["triggers"] : nullptr;
    if (!triggers || !triggers->is_array() || triggers->empty())
        return invalid_argument("triggers must be a non-empty array of strings");
    for (size_t i = 0; i < triggers->size(); ++i)
        if (!(*triggers)[i].is_string() || (*triggers)[i].get<std::string>().empty())
            return invalid_argument(fmt::format("triggers[{}] must be a non-empty string", i));
    J tags = J::array();
    for (size_t i = 0; i < structures.size(); ++i) {
        const J& s = structures[i];
        const std::string at = fmt::format("structures[{}]", i);
        if (!s.is_object()) return invalid_argument(at + " must be an object {begin, schema, end}");
        for (const char* key : {"begin", "end"})
            if (!s.contains(key) || !s[key].is_string())
                return invalid_argument(fmt::format("{}.{} must be a string", at, key));
        if (!s.contains("schema")) return invalid_argument(at + ".schema is required");
        const std::string begin = s["begin"].get<std::string>();
        bool triggered = false;
        for (const J& t : *triggers) triggered |= begin.rfind(t.get<std::string>(), 0) == 0;
        if (!triggered) return invalid_argument(fmt::format("{}.begin '{}' starts with none of the triggers", at, begin));
        tags.push_back(J{{"type", "tag"},
                         {"begin", begin},
                         {"content", J{{"type", "json_schema"}, {"json_schema", s["schema"]}}},
                         {"end", s["end"]}});
    }
    return J{{"type", "triggered_tags"}, {"triggers", *triggers}, {"tags", std::move(tags)}};
}

}  // namespace

Result<GrammarSpec> structural_tag_grammar(const J& tag) {
    if (!tag.is_object()) return invalid_argument("a structural tag must be an object");
    if (tag.contains("type") && tag["type"] != "structural_tag")
        return invalid_argument("a structural tag's type must be \"structural_tag\"");
    J format;
    if (tag.contains("format")) {
        if (tag.contains("structures")) return invalid_argument("give either 'format' or the legacy 'structures', not both");
        format = tag["format"];
        if (!format.is_object()) return invalid_argument("format must be an object with a 'type'");
    } else if (tag.contains("structures")) {
        QS_ASSIGN_OR_RETURN(format, from_legacy(tag));
    } else {
        return invalid_argument("a structural tag needs 'format' (or the legacy 'structures' and 'triggers')");
    }
    QS_RETURN_IF_ERROR(check_formats(format, "format"));
    GrammarSpec spec;
    spec.kind = GrammarSpec::Kind::kStructuralTag;
    spec.text = J{{"type", "structural_tag"}, {"format", std::move(format)}}.dump();
    return spec;
}

}  // namespace qs::grammar

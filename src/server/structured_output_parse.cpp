// Structured-output fields → GenerationSpec::grammar (see structured_output_parse.h).
#include "server/structured_output_parse.h"

#include <fmt/format.h>

#include "grammar/structural_tag.h"
#include "server/request_json.h"

namespace qs {

namespace {

using J = nlohmann::ordered_json;
using MaybeError = std::optional<ApiError>;
using grammar::GrammarSpec;

using request_json::bad;
using request_json::field;
using request_json::unsupported;

// Records the request's constraint; a second one is an error naming it.
MaybeError set_constraint(GenerationSpec& s, const std::string& param, GrammarSpec g) {
    if (!s.grammar_param.empty())
        return bad(param, fmt::format("'{}' and '{}' both constrain the output; send one", s.grammar_param, param));
    s.grammar = std::move(g);
    s.grammar_param = param;
    return std::nullopt;
}

// A JSON schema given as an object, or as JSON text (vLLM accepts both for guided_json and
// structured_outputs.json).
MaybeError schema_of(const J& v, const std::string& param, bool text_allowed, GrammarSpec& g) {
    J schema = v;
    if (v.is_string() && text_allowed) {
        schema = J::parse(v.get<std::string>(), nullptr, false);
        if (schema.is_discarded()) return bad(param, fmt::format("'{}' is not valid JSON", param));
    }
    if (!schema.is_object()) return bad(param, fmt::format("'{}' must be a JSON schema (an object)", param));
    g.kind = GrammarSpec::Kind::kJsonSchema;
    g.text = schema.dump();
    return std::nullopt;
}

MaybeError choices_of(const J& v, const std::string& param, GrammarSpec& g) {
    if (!v.is_array() || v.empty()) return bad(param, fmt::format("'{}' must be a non-empty array of strings", param));
    for (const J& c : v) {
        if (!c.is_string() || c.get<std::string>().empty())
            return bad(param, fmt::format("'{}' entries must be non-empty strings", param));
        g.choices.push_back(c.get<std::string>());
    }
    g.kind = GrammarSpec::Kind::kChoice;
    return std::nullopt;
}

MaybeError text_of(const J& v, const std::string& param, GrammarSpec::Kind kind, GrammarSpec& g) {
    if (!v.is_string() || v.get<std::string>().empty())
        return bad(param, fmt::format("'{}' must be a non-empty string", param));
    g.kind = kind;
    g.text = v.get<std::string>();
    return std::nullopt;
}

// A structural tag (grammar/structural_tag.h): an object, or (structured_outputs, as vLLM
// takes it) its JSON text.
MaybeError structural_tag_of(const J& v, const std::string& param, bool text_allowed, GrammarSpec& g) {
    J tag = v;
    if (v.is_string() && text_allowed) {
        tag = J::parse(v.get<std::string>(), nullptr, false);
        if (tag.is_discarded()) return bad(param, fmt::format("'{}' is not valid JSON", param));
    }
    auto r = grammar::structural_tag_grammar(tag);
    if (!r.is_ok()) return bad(param, fmt::format("'{}': {}", param, r.status().message()));
    g = std::move(r).value();
    return std::nullopt;
}

MaybeError parse_response_format(const J& o, GenerationSpec& s) {
    const J* rf = field(o, "response_format");
    if (!rf) return std::nullopt;
    if (!rf->is_object() || !rf->contains("type") || !(*rf)["type"].is_string())
        return bad("response_format", "'response_format' must be an object with a string 'type'");
    const std::string t = (*rf)["type"].get<std::string>();
    if (t == "text") return std::nullopt;
    GrammarSpec g;
    if (t == "json_object") {
        s.json_object = true;
        g.kind = GrammarSpec::Kind::kJsonObject;
    } else if (t == "json_schema") {
        const J* js = field(*rf, "json_schema");
        if (!js || !js->is_object())
            return bad("response_format.json_schema", "response_format type 'json_schema' needs a 'json_schema' object");
        if (const J* strict = field(*js, "strict"); strict && !strict->is_boolean())
            return bad("response_format.json_schema.strict", "'response_format.json_schema.strict' must be a boolean");
        const J* schema = field(*js, "schema");
        if (!schema)
            return bad("response_format.json_schema.schema", "'response_format.json_schema.schema' is required");
        if (auto e = schema_of(*schema, "response_format.json_schema.schema", false, g)) return e;
    } else if (t == "structural_tag") {
        if (auto e = structural_tag_of(*rf, "response_format", false, g)) return e;
    } else {
        return unsupported("response_format",
                           fmt::format("response_format type '{}' is not supported (text, json_object, json_schema, "
                                       "structural_tag)", t));
    }
    return set_constraint(s, "response_format", std::move(g));
}

// vLLM's StructuredOutputsParams: exactly one of json, regex, choice, grammar, json_object.
MaybeError parse_vllm_structured_outputs(const J& o, GenerationSpec& s) {
    const J* so = field(o, "structured_outputs");
    if (!so) return std::nullopt;
    if (!so->is_object()) return bad("structured_outputs", "'structured_outputs' must be an object");
    GrammarSpec g;
    int kinds = 0;
    for (auto it = so->begin(); it != so->end(); ++it) {
        const std::string key = it.key();
        const std::string param = "structured_outputs." + key;
        const J& v = *it;
        if (v.is_null()) continue;
        if (key == "json") {
            ++kinds;
            if (auto e = schema_of(v, param, true, g)) return e;
        } else if (key == "regex") {
            ++kinds;
            if (auto e = text_of(v, param, GrammarSpec::Kind::kRegex, g)) return e;
        } else if (key == "choice") {
            ++kinds;
            if (auto e = choices_of(v, param, g)) return e;
        } else if (key == "grammar") {
            ++kinds;
            if (auto e = text_of(v, param, GrammarSpec::Kind::kGrammar, g)) return e;
        } else if (key == "json_object") {
            if (!v.is_boolean()) return bad(param, fmt::format("'{}' must be a boolean", param));
            if (v.get<bool>()) {
                ++kinds;
                g.kind = GrammarSpec::Kind::kJsonObject;
            }
        } else if (key == "disable_any_whitespace") {
            if (!v.is_boolean()) return bad(param, fmt::format("'{}' must be a boolean", param));
            g.any_whitespace = !v.get<bool>();
        } else if (key == "disable_fallback" || key == "disable_additional_properties") {
            // One backend (no fallback); schemas are compiled strictly (no properties beyond the
            // schema's), so both values hold already.
            if (!v.is_boolean()) return bad(param, fmt::format("'{}' must be a boolean", param));
        } else if (key == "structural_tag") {
            ++kinds;
            if (auto e = structural_tag_of(v, param, true, g)) return e;
        } else if (key == "whitespace_pattern") {
            return unsupported(param, fmt::format("'{}' is not supported", param));
        } else {
            return bad(param, fmt::format("'{}' is not a structured_outputs field (json, regex, choice, grammar, "
                                          "json_object, structural_tag, disable_any_whitespace)", key));
        }
    }
    if (kinds != 1)
        return bad("structured_outputs", "'structured_outputs' must set exactly one of json, regex, choice, grammar, "
                                         "json_object, structural_tag");
    return set_constraint(s, "structured_outputs", std::move(g));
}

MaybeError parse_guided(const J& o, GenerationSpec& s) {
    if (const J* v = field(o, "guided_json")) {
        GrammarSpec g;
        if (auto e = schema_of(*v, "guided_json", true, g)) return e;
        if (auto e = set_constraint(s, "guided_json", std::move(g))) return e;
    }
    if (const J* v = field(o, "guided_regex")) {
        GrammarSpec g;
        if (auto e = text_of(*v, "guided_regex", GrammarSpec::Kind::kRegex, g)) return e;
        if (auto e = set_constraint(s, "guided_regex", std::move(g))) return e;
    }
    if (const J* v = field(o, "guided_choice")) {
        GrammarSpec g;
        if (auto e = choices_of(*v, "guided_choice", g)) return e;
        if (auto e = set_constraint(s, "guided_choice", std::move(g))) return e;
    }
    if (const J* v = field(o, "guided_grammar")) {
        GrammarSpec g;
        if (auto e = text_of(*v, "guided_grammar", GrammarSpec::Kind::kGrammar, g)) return e;
        if (auto e = set_constraint(s, "guided_grammar", std::move(g))) return e;
    }
    return std::nullopt;
}

}  // namespace

std::optional<ApiError> parse_structured_outputs(const J& o, GenerationSpec& s) {
    // tool_choice "required" / named was recorded by parse_tools; its grammar comes later.
    if (s.tool_choice_required || !s.tool_choice_function.empty()) s.grammar_param = "tool_choice";
    if (auto e = parse_response_format(o, s)) return e;
    if (auto e = parse_vllm_structured_outputs(o, s)) return e;
    return parse_guided(o, s);
}

}  // namespace qs

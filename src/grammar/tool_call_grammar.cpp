// Tool-call structural tags (see tool_call_grammar.h); the shapes follow xgrammar's own
// builtin Qwen tags (python/xgrammar/builtin_structural_tag.py), without the reasoning prefix:
// the engine starts a chat constraint after </think> itself.
#include "grammar/tool_call_grammar.h"

#include <fmt/format.h>

#include "grammar/schema_check.h"

namespace qs::grammar {

namespace {

using J = nlohmann::ordered_json;

J parameters_of(const J& function) {
    auto it = function.find("parameters");
    if (it == function.end() || it->is_null()) return J{{"type", "object"}, {"properties", J::object()}};
    return *it;
}

J call_tag(const J& function, bool xml) {
    const std::string name = function["name"].get<std::string>();
    if (xml)
        return J{{"type", "tag"},
                 {"begin", fmt::format("<tool_call>\n<function={}>\n", name)},
                 {"content", J{{"type", "json_schema"},
                               {"json_schema", parameters_of(function)},
                               {"style", "qwen_xml"},
                               {"max_whitespace_cnt", kMaxJsonWhitespace}}},
                 {"end", "\n</function>\n</tool_call>"}};
    return J{{"type", "tag"},
             {"begin", fmt::format("<tool_call>\n{{\"name\": {}, \"arguments\": ", J(name).dump())},
             {"content", J{{"type", "json_schema"},
                           {"json_schema", parameters_of(function)},
                           {"max_whitespace_cnt", kMaxJsonWhitespace}}},
             {"end", "}\n</tool_call>"}};
}

}  // namespace

Result<GrammarSpec> tool_call_grammar(const J& tools, const std::string& function, bool xml, bool parallel) {
    if (!tools.is_array() || tools.empty()) return invalid_argument("tool_choice needs 'tools'");
    for (size_t i = 0; i < tools.size(); ++i)
        if (auto bad = unsupported_schema_feature(parameters_of(tools[i]["function"])))
            return invalid_argument(fmt::format("tools[{}].function.parameters uses a feature that is not supported: {}",
                                                i, *bad));
    J format;
    if (!function.empty()) {
        for (const J& t : tools)
            if (t["function"]["name"] == function) format = call_tag(t["function"], xml);
        if (format.is_null())
            return invalid_argument(fmt::format("tool_choice names the function '{}', which is not in 'tools'", function));
    } else {
        J tags = J::array();
        for (const J& t : tools) tags.push_back(call_tag(t["function"], xml));
        format = J{{"type", "tags_with_separator"}, {"tags", std::move(tags)}, {"separator", "\n"}, {"at_least_one", true},
                   {"stop_after_first", !parallel}};
    }
    GrammarSpec spec;
    spec.kind = GrammarSpec::Kind::kStructuralTag;
    spec.text = J{{"type", "structural_tag"}, {"format", std::move(format)}}.dump();
    return spec;
}

}  // namespace qs::grammar

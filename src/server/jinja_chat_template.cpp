// JinjaChatTemplate (see jinja_chat_template.h).
#include "server/jinja_chat_template.h"

#include <fmt/format.h>

#include "tokenizer/chat_template.h"

namespace qs {

namespace {

using J = nlohmann::ordered_json;

// The variables the request itself sets: a kwarg of the same name would be a duplicate
// argument in transformers.
constexpr const char* kReserved[] = {"messages", "tools", "documents", "add_generation_prompt"};

// vLLM parses tool-call arguments given as JSON strings before templating.
Result<J> parse_tool_arguments(const J& messages) {
    J out = messages;
    for (size_t i = 0; i < out.size(); ++i) {
        J& m = out[i];
        if (!m.is_object() || !m.contains("tool_calls") || !m["tool_calls"].is_array()) continue;
        for (size_t k = 0; k < m["tool_calls"].size(); ++k) {
            J& call = m["tool_calls"][k];
            J* fn = call.is_object() && call.contains("function") && call["function"].is_object() ? &call["function"]
                                                                                                     : &call;
            if (!fn->is_object() || !fn->contains("arguments") || !(*fn)["arguments"].is_string()) continue;
            J parsed = J::parse((*fn)["arguments"].get<std::string>(), nullptr, false);
            if (parsed.is_discarded())
                return invalid_argument(fmt::format("messages[{}].tool_calls[{}].function.arguments is not valid JSON", i, k));
            (*fn)["arguments"] = std::move(parsed);
        }
    }
    return out;
}

}  // namespace

Result<JinjaChatTemplate> JinjaChatTemplate::load(const std::string& text, J special_tokens) {
    QS_ASSIGN_OR_RETURN(jinja::Template t, jinja::Template::parse(text));
    return JinjaChatTemplate(std::move(t), std::move(special_tokens));
}

Result<std::string> JinjaChatTemplate::render(const J& messages, const J& tools, const ChatRenderOptions& options) const {
    if (!messages.is_array()) return invalid_argument("chat template: messages must be an array");
    J context = J::object();
    QS_ASSIGN_OR_RETURN(context["messages"], parse_tool_arguments(messages));
    context["tools"] = tools.is_array() ? tools : J();
    context["documents"] = J();
    context["add_generation_prompt"] = options.add_generation_prompt;
    for (auto it = special_tokens_.begin(); it != special_tokens_.end(); ++it) context[it.key()] = it.value();
    if (options.template_kwargs.is_object()) {
        for (auto it = options.template_kwargs.begin(); it != options.template_kwargs.end(); ++it) {
            for (const char* r : kReserved)
                if (it.key() == r)
                    return invalid_argument(fmt::format("chat_template_kwargs.{}: set by the request itself, not a kwarg", r));
            context[it.key()] = it.value();
        }
    }
    QS_ASSIGN_OR_RETURN(std::string rendered, template_.render(context));
    if (!options.continue_final_message) return rendered;
    return tok::cut_after_final_message(messages, std::move(rendered));
}

}  // namespace qs

// Chat template selection and dispatch (see chat_template.h).
#include "tokenizer/chat_template.h"

#include <string_view>

namespace qs::tok {

namespace {

std::string_view strip(std::string_view s) {
    const char* ws = " \t\n\r\f\v";
    const size_t b = s.find_first_not_of(ws);
    if (b == std::string_view::npos) return {};
    return s.substr(b, s.find_last_not_of(ws) - b + 1);
}

}  // namespace

Result<std::string> cut_after_final_message(const nlohmann::ordered_json& messages, std::string rendered) {
    if (messages.empty()) return invalid_argument("continue_final_message needs a message to continue");
    const auto& content = messages.back().contains("content") ? messages.back()["content"] : nlohmann::ordered_json();
    std::string text;
    bool found = false;
    if (content.is_string()) {
        text = content.get<std::string>();
        found = true;
    } else if (content.is_array()) {
        for (auto it = content.rbegin(); it != content.rend() && !found; ++it)
            if (it->is_object() && it->contains("text") && (*it)["text"].is_string()) {
                text = (*it)["text"].get<std::string>();
                found = true;
            }
    }
    if (!found) return invalid_argument("continue_final_message: the final message has no text to continue");
    const std::string_view needle = strip(text);
    const size_t at = rendered.rfind(needle);
    if (at == std::string::npos)
        return invalid_argument("continue_final_message: the final message does not appear in the rendered chat");
    rendered.resize(at + needle.size());
    return rendered;
}

Result<ChatTemplate> ChatTemplate::detect(const std::string& text) {
    // Qwen2.5 writes tool calls as Qwen3 does but has its own default system prompt.
    if (text.find("You are Qwen, created by Alibaba Cloud") != std::string::npos)
        return unsupported("the chat template is Qwen2.5's, not the Qwen3 or Qwen3.5/3.6 one");
    if (text.find("<function=") != std::string::npos && text.find("<parameter=") != std::string::npos)
        return ChatTemplate(ChatFormat::kQwen35);
    if (text.find("<tool_call>\\n{\\\"name\\\": <function-name>") != std::string::npos ||
        (text.find("<tool_call>") != std::string::npos && text.find("\"arguments\": ") != std::string::npos))
        return ChatTemplate(ChatFormat::kQwen3);
    if (text.empty()) return not_found("the model has no chat template");
    return unsupported("the model's chat template is neither the Qwen3 nor the Qwen3.5/3.6 one");
}

Result<ChatTemplate> ChatTemplate::from_name(const std::string& name) {
    if (name == "qwen3") return ChatTemplate(ChatFormat::kQwen3);
    if (name == "qwen3.5" || name == "qwen3.6" || name == "qwen35" || name == "qwen36")
        return ChatTemplate(ChatFormat::kQwen35);
    return invalid_argument("unknown chat template '" + name + "' (qwen3, qwen3.5, qwen3.6)");
}

Result<std::string> ChatTemplate::render(const nlohmann::ordered_json& messages,
                                         const nlohmann::ordered_json& tools,
                                         const ChatOptions& options) const {
    if (!messages.is_array()) return invalid_argument("chat template: messages must be an array");
    for (size_t i = 0; i < messages.size(); ++i) {
        const auto& m = messages[i];
        if (!m.is_object()) return invalid_argument("chat template: messages[" + std::to_string(i) + "] is not an object");
        if (!m.contains("role") || !m["role"].is_string())
            return invalid_argument("chat template: messages[" + std::to_string(i) + "].role must be a string");
    }
    if (!tools.is_null() && !tools.is_array())
        return invalid_argument("chat template: tools must be an array or null");
    try {
        Result<std::string> r = format_ == ChatFormat::kQwen3 ? render_qwen3(messages, tools, options)
                                                               : render_qwen35(messages, tools, options);
        if (!r.is_ok() || !options.continue_final_message) return r;
        return cut_after_final_message(messages, std::move(r).value());
    } catch (const nlohmann::json::exception& e) {
        return invalid_argument(std::string("chat template: a value has the wrong type: ") + e.what());
    }
}

}  // namespace qs::tok

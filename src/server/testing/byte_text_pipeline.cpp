// ByteTextPipeline (see byte_text_pipeline.h): ChatML rendering with the validation a real
// template does (roles, content types), byte-level encode/decode with three special tokens.
#include "server/testing/byte_text_pipeline.h"

#include <fmt/format.h>

#include <array>

namespace qs {

namespace {

constexpr std::array<std::string_view, 3> kSpecial = {"<|im_start|>", "<|im_end|>", "<|endoftext|>"};

Result<std::string> content_text(const nlohmann::ordered_json& content, size_t i) {
    if (content.is_null()) return std::string();
    if (content.is_string()) return content.get<std::string>();
    if (content.is_array()) {
        std::string out;
        for (size_t k = 0; k < content.size(); ++k) {
            const auto& part = content[k];
            if (!part.is_object() || !part.contains("type") || part["type"] != "text" ||
                !part.contains("text") || !part["text"].is_string())
                return invalid_argument(fmt::format("messages[{}].content[{}]: only text parts are supported", i, k));
            out += part["text"].get<std::string>();
        }
        return out;
    }
    return invalid_argument(fmt::format("messages[{}].content must be a string, an array of parts or null", i));
}

}  // namespace

Result<std::string> ByteTextPipeline::render_chat(const nlohmann::ordered_json& messages,
                                                  const nlohmann::ordered_json& tools,
                                                  const ChatRenderOptions& options) const {
    if (!messages.is_array() || messages.empty()) return invalid_argument("messages must be a non-empty array");
    std::string out;
    if (tools.is_array() && !tools.empty()) {
        out += "<|im_start|>system\n# Tools\n";
        for (const auto& t : tools) out += t.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
        out += "Call a tool as <tool_call>{\"name\": ..., \"arguments\": ...}</tool_call><|im_end|>\n";
    }
    for (size_t i = 0; i < messages.size(); ++i) {
        const auto& m = messages[i];
        if (!m.is_object()) return invalid_argument(fmt::format("messages[{}] must be an object", i));
        if (!m.contains("role") || !m["role"].is_string())
            return invalid_argument(fmt::format("messages[{}].role must be a string", i));
        const std::string role = m["role"].get<std::string>();
        if (role != "system" && role != "developer" && role != "user" && role != "assistant" && role != "tool")
            return invalid_argument(fmt::format("messages[{}]: unknown role '{}'", i, role));
        QS_ASSIGN_OR_RETURN(std::string text, content_text(m.value("content", nlohmann::ordered_json()), i));
        out += "<|im_start|>" + (role == "developer" ? std::string("system") : role) + "\n";
        if (role == "assistant" && m.contains("reasoning_content") && m["reasoning_content"].is_string())
            out += "<think>\n" + m["reasoning_content"].get<std::string>() + "\n</think>\n\n";
        out += text;
        if (role == "assistant" && m.contains("tool_calls") && m["tool_calls"].is_array()) {
            for (const auto& tc : m["tool_calls"]) {
                if (!tc.is_object() || !tc.contains("function") || !tc["function"].is_object())
                    return invalid_argument(fmt::format("messages[{}].tool_calls: each needs a function object", i));
                out += "<tool_call>" + tc["function"].dump() + "</tool_call>";
            }
        }
        if (!(options.continue_final_message && i + 1 == messages.size())) out += "<|im_end|>\n";
    }
    if (options.add_generation_prompt) {
        out += "<|im_start|>assistant\n";
        out += options.enable_thinking ? "<think>\n" : "<think>\n\n</think>\n\n";
    }
    return out;
}

std::vector<int32_t> ByteTextPipeline::encode(std::string_view text) const {
    std::vector<int32_t> ids;
    ids.reserve(text.size());
    size_t i = 0;
    while (i < text.size()) {
        bool special = false;
        if (text[i] == '<') {
            for (size_t k = 0; k < kSpecial.size(); ++k) {
                if (text.substr(i, kSpecial[k].size()) == kSpecial[k]) {
                    ids.push_back(kImStart + int32_t(k));
                    i += kSpecial[k].size();
                    special = true;
                    break;
                }
            }
        }
        if (!special) ids.push_back(int32_t(static_cast<unsigned char>(text[i++])));
    }
    return ids;
}

std::string ByteTextPipeline::decode(std::span<const int32_t> ids) const {
    std::string out;
    for (int32_t id : ids) out += token_text(id);
    return out;
}

std::string ByteTextPipeline::token_text(int32_t id) const {
    if (id >= 0 && id < 256) return std::string(1, char(id));
    if (id >= kImStart && id < kVocabSize) return std::string(kSpecial[size_t(id - kImStart)]);
    return std::string();
}

}  // namespace qs

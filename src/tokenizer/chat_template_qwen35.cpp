// Native renderer of the Qwen3.5/3.6 chat template (model.md §5.2; the Jinja reconstruction it
// is tested against is tests/data/tokenizer/qwen36_chat_template.jinja), statement by
// statement: trimmed contents (strings or lists of text/image/video parts), tools in the system
// turn before the system prompt, XML tool calls with one <parameter=...> per argument, grouped
// tool responses, think blocks after the last real user query (or always with
// preserve_thinking), and the errors the template raises. Any thread.
#include "tokenizer/chat_template.h"
#include "tokenizer/python_format.h"

namespace qs::tok {

namespace {

using Json = nlohmann::ordered_json;

constexpr const char* kToolsHeader =
    "<|im_start|>system\n# Tools\n\nYou have access to the following functions:\n\n<tools>";
// Stand-in wording (see the .jinja file's header); the structure follows model.md §5.2.
constexpr const char* kToolsInstructions =
    "\n\nIf you choose to call a function ONLY reply in the following format with NO suffix:\n\n"
    "<tool_call>\n<function=example_function_name>\n<parameter=example_parameter_1>\nvalue_1\n"
    "</parameter>\n<parameter=example_parameter_2>\nThis is the value for the second parameter\n"
    "that can span\nmultiple lines\n</parameter>\n</function>\n</tool_call>\n\n<IMPORTANT>\n"
    "Reminder:\n- Function calls MUST follow the specified format: an inner <function=...></function> "
    "block must be nested within <tool_call></tool_call> XML tags\n- Required parameters MUST be "
    "specified\n- You may provide optional reasoning for your function call in natural language "
    "BEFORE the function call, but NOT after\n- If there is no function call available, answer the "
    "question like normal with your current knowledge and do not tell the user about function "
    "calls\n</IMPORTANT>";

const Json* field(const Json& obj, const char* key) {
    if (!obj.is_object()) return nullptr;
    auto it = obj.find(key);
    return it == obj.end() ? nullptr : &*it;
}

std::string where(size_t i) { return "chat template: messages[" + std::to_string(i) + "]"; }

struct VisionCounts {
    int images = 0;
    int videos = 0;
};

// The template's render_content macro.
Result<std::string> render_content(const Json& message, size_t index, bool count,
                                   VisionCounts& counts, const ChatOptions& options) {
    const Json* content = field(message, "content");
    if (content == nullptr || content->is_null()) return std::string();
    if (content->is_string()) return content->get<std::string>();
    if (!content->is_array()) return invalid_argument(where(index) + ".content has an unexpected type (string, array of parts or null)");
    std::string out;
    for (const Json& item : *content) {
        if (!item.is_object()) return invalid_argument(where(index) + ".content has a part that is not an object");
        const Json* type = field(item, "type");
        const bool is_type = [&](const char* t) { return type != nullptr && type->is_string() && *type == t; }("image");
        if (item.contains("image") || item.contains("image_url") || is_type) {
            if (count) ++counts.images;
            if (options.add_vision_id) out += "Picture " + std::to_string(counts.images) + ": ";
            out += "<|vision_start|><|image_pad|><|vision_end|>";
        } else if (item.contains("video") || (type != nullptr && type->is_string() && *type == "video")) {
            if (count) ++counts.videos;
            if (options.add_vision_id) out += "Video " + std::to_string(counts.videos) + ": ";
            out += "<|vision_start|><|video_pad|><|vision_end|>";
        } else if (item.contains("text")) {
            std::string text;
            if (!python_str(item["text"], text)) return invalid_argument(where(index) + ".content has a text part whose text is not a string");
            out += text;
        } else {
            return invalid_argument(where(index) + ".content has a part of unexpected type");
        }
    }
    return out;
}

bool starts_with(const std::string& s, const std::string& p) { return s.compare(0, p.size(), p) == 0; }
bool ends_with(const std::string& s, const std::string& p) {
    return s.size() >= p.size() && s.compare(s.size() - p.size(), p.size(), p) == 0;
}

Status render_tool_calls(const Json& calls, const std::string& content, size_t index, std::string& out) {
    for (size_t k = 0; k < calls.size(); ++k) {
        const Json* call = &calls[k];
        if (const Json* fn = field(*call, "function")) call = fn;
        const Json* name = field(*call, "name");
        if (name == nullptr || !name->is_string())
            return invalid_argument(where(index) + ".tool_calls[" + std::to_string(k) + "] has no string function name");
        if (k == 0) out += python_strip(content).empty() ? "" : "\n\n";
        else out += "\n";
        out += "<tool_call>\n<function=" + name->get<std::string>() + ">\n";
        if (const Json* args = field(*call, "arguments")) {
            Json parsed;
            if (args->is_string()) {  // vLLM parses JSON-string arguments before templating
                parsed = Json::parse(args->get<std::string>(), nullptr, false);
                if (parsed.is_discarded())
                    return invalid_argument(where(index) + ".tool_calls[" + std::to_string(k) + "].arguments is not valid JSON");
                args = &parsed;
            }
            if (!args->is_object())
                return invalid_argument(where(index) + ".tool_calls[" + std::to_string(k) + "].arguments must be an object");
            for (const auto& [arg_name, value] : args->items()) {
                out += "<parameter=" + arg_name + ">\n";
                std::string text;
                if (value.is_object() || value.is_array()) text = python_json_dumps(value);
                else python_str(value, text);
                out += text + "\n</parameter>\n";
            }
        }
        out += "</function>\n</tool_call>";
    }
    return Status::ok();
}

}  // namespace

Result<std::string> render_qwen35(const Json& messages, const Json& tools, const ChatOptions& options) {
    if (messages.empty()) return invalid_argument("chat template: no messages");
    std::string out;
    VisionCounts counts;
    const bool first_is_system = messages[0]["role"] == "system";
    if (tools.is_array() && !tools.empty()) {
        out += kToolsHeader;
        for (const Json& tool : tools) out += "\n" + python_json_dumps(tool);
        out += "\n</tools>";
        out += kToolsInstructions;
        if (first_is_system) {
            QS_ASSIGN_OR_RETURN(std::string raw, render_content(messages[0], 0, false, counts, options));
            const std::string system = python_strip(raw);
            if (!system.empty()) out += "\n\n" + system;
        }
        out += "<|im_end|>\n";
    } else if (first_is_system) {
        QS_ASSIGN_OR_RETURN(std::string raw, render_content(messages[0], 0, false, counts, options));
        out += "<|im_start|>system\n" + python_strip(raw) + "<|im_end|>\n";
    }

    bool multi_step_tool = true;
    size_t last_query = messages.size() - 1;
    for (size_t r = messages.size(); r-- > 0 && multi_step_tool;) {
        if (messages[r]["role"] != "user") continue;
        QS_ASSIGN_OR_RETURN(std::string raw, render_content(messages[r], r, false, counts, options));
        const std::string content = python_strip(raw);
        if (!(starts_with(content, "<tool_response>") && ends_with(content, "</tool_response>"))) {
            multi_step_tool = false;
            last_query = r;
        }
    }
    if (multi_step_tool) return invalid_argument("chat template: no user query found in messages");

    for (size_t i = 0; i < messages.size(); ++i) {
        const Json& m = messages[i];
        const std::string role = m["role"].get<std::string>();
        QS_ASSIGN_OR_RETURN(std::string raw, render_content(m, i, true, counts, options));
        std::string content = python_strip(raw);
        if (role == "system") {
            if (i != 0) return invalid_argument(where(i) + ": a system message must be the first message");
        } else if (role == "user") {
            out += "<|im_start|>user\n" + content + "<|im_end|>\n";
        } else if (role == "assistant") {
            std::string reasoning;
            const Json* rc = field(m, "reasoning_content");
            if (rc != nullptr && rc->is_string()) {
                reasoning = rc->get<std::string>();
            } else if (content.find("</think>") != std::string::npos) {
                const std::string before = content.substr(0, content.find("</think>"));
                const std::string_view trimmed = strip_chars(before, "\n", false, true);
                const size_t open = trimmed.rfind("<think>");
                const std::string_view inner = open == std::string_view::npos ? trimmed : trimmed.substr(open + 7);
                reasoning = std::string(strip_chars(inner, "\n", true, false));
                content = std::string(strip_chars(content.substr(content.rfind("</think>") + 8), "\n", true, false));
            }
            reasoning = python_strip(reasoning);
            if (options.preserve_thinking || i > last_query) {
                out += "<|im_start|>assistant\n<think>\n" + reasoning + "\n</think>\n\n" + content;
            } else {
                out += "<|im_start|>assistant\n" + content;
            }
            const Json* calls = field(m, "tool_calls");
            if (calls != nullptr && calls->is_array() && !calls->empty())
                QS_RETURN_IF_ERROR(render_tool_calls(*calls, content, i, out));
            out += "<|im_end|>\n";
        } else if (role == "tool") {
            if (i == 0 || messages[i - 1]["role"] != "tool") out += "<|im_start|>user";
            out += "\n<tool_response>\n" + content + "\n</tool_response>";
            if (i + 1 == messages.size() || messages[i + 1]["role"] != "tool") out += "<|im_end|>\n";
        } else {
            return invalid_argument(where(i) + ": unexpected message role '" + role + "'");
        }
    }
    if (options.add_generation_prompt) {
        out += "<|im_start|>assistant\n";
        out += options.enable_thinking ? "<think>\n" : "<think>\n\n</think>\n\n";
    }
    return out;
}

}  // namespace qs::tok

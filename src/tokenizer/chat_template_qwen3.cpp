// Native renderer of the Qwen3 chat template (the Jinja text in
// shared/data/tokenizers/qwen3/tokenizer_config.json), statement by statement: JSON tool calls
// inside <tool_call>, think blocks only after the last real user query, silently skipped
// unknown roles (as the template does). Where jinja2 would raise (a non-string content joined
// with '+'), this returns an error naming the message. Any thread.
#include "tokenizer/chat_template.h"
#include "tokenizer/python_format.h"

namespace qs::tok {

namespace {

using Json = nlohmann::ordered_json;

constexpr const char* kToolsHeader =
    "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
    "You are provided with function signatures within <tools></tools> XML tags:\n<tools>";
constexpr const char* kToolsFooter =
    "\n</tools>\n\nFor each function call, return a json object with function name and arguments "
    "within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, "
    "\"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n";

bool truthy(const Json* v) {
    if (v == nullptr || v->is_null()) return false;
    if (v->is_boolean()) return v->get<bool>();
    if (v->is_string() || v->is_array() || v->is_object()) return !v->empty();
    if (v->is_number_float()) return v->get<double>() != 0.0;
    if (v->is_number()) return v->get<int64_t>() != 0;
    return true;
}

const Json* field(const Json& obj, const char* key) {
    if (!obj.is_object()) return nullptr;
    auto it = obj.find(key);
    return it == obj.end() ? nullptr : &*it;
}

Result<std::string> string_content(const Json& messages, size_t i) {
    const Json* c = field(messages[i], "content");
    if (c == nullptr || !c->is_string())
        return invalid_argument("chat template: messages[" + std::to_string(i) +
                                "].content must be a string for the Qwen3 template");
    return c->get<std::string>();
}

bool is_tool_response(const std::string& s) {
    const std::string open = "<tool_response>", close = "</tool_response>";
    return s.size() >= open.size() && s.compare(0, open.size(), open) == 0 &&
           s.size() >= close.size() && s.compare(s.size() - close.size(), close.size(), close) == 0;
}

std::string last_part(const std::string& s, const std::string& sep) {
    const size_t pos = s.rfind(sep);
    return pos == std::string::npos ? s : s.substr(pos + sep.size());
}

std::string first_part(const std::string& s, const std::string& sep) {
    const size_t pos = s.find(sep);
    return pos == std::string::npos ? s : s.substr(0, pos);
}

Status render_tool_calls(const Json& calls, const std::string& content, size_t index, std::string& out) {
    if (!calls.is_array()) return invalid_argument("chat template: messages[" + std::to_string(index) + "].tool_calls must be an array");
    for (size_t k = 0; k < calls.size(); ++k) {
        if ((k == 0 && !content.empty()) || k > 0) out += "\n";
        const Json* call = &calls[k];
        if (truthy(field(*call, "function"))) call = field(*call, "function");
        out += "<tool_call>\n{\"name\": \"";
        if (const Json* name = field(*call, "name")) {
            std::string text;
            if (!python_str(*name, text))
                return invalid_argument("chat template: a tool call name must be a string");
            out += text;
        }
        out += "\", \"arguments\": ";
        const Json* args = field(*call, "arguments");
        if (args == nullptr)
            return invalid_argument("chat template: messages[" + std::to_string(index) + "] has a tool call without arguments");
        out += args->is_string() ? args->get<std::string>() : python_json_dumps(*args);
        out += "}\n</tool_call>";
    }
    return Status::ok();
}

}  // namespace

Result<std::string> render_qwen3(const Json& messages, const Json& tools, const ChatOptions& options) {
    if (messages.empty()) return invalid_argument("chat template: no messages");
    std::string out;
    const bool first_is_system = messages[0]["role"] == "system";
    if (truthy(&tools)) {
        out += "<|im_start|>system\n";
        if (first_is_system) {
            QS_ASSIGN_OR_RETURN(std::string system, string_content(messages, 0));
            out += system + "\n\n";
        }
        out += kToolsHeader;
        for (const Json& tool : tools) out += "\n" + python_json_dumps(tool);
        out += kToolsFooter;
    } else if (first_is_system) {
        QS_ASSIGN_OR_RETURN(std::string system, string_content(messages, 0));
        out += "<|im_start|>system\n" + system + "<|im_end|>\n";
    }

    // The last user message that is not a bare tool response.
    size_t last_query = messages.size() - 1;
    for (size_t r = messages.size(); r-- > 0;) {
        if (messages[r]["role"] != "user") continue;
        QS_ASSIGN_OR_RETURN(std::string content, string_content(messages, r));
        if (!is_tool_response(content)) {
            last_query = r;
            break;
        }
    }

    for (size_t i = 0; i < messages.size(); ++i) {
        const Json& m = messages[i];
        const std::string role = m["role"].get<std::string>();
        const bool last = i + 1 == messages.size();
        if (role == "user" || (role == "system" && i != 0)) {
            QS_ASSIGN_OR_RETURN(std::string content, string_content(messages, i));
            out += "<|im_start|>" + role + "\n" + content + "<|im_end|>\n";
        } else if (role == "assistant") {
            QS_ASSIGN_OR_RETURN(std::string content, string_content(messages, i));
            std::string reasoning;
            const Json* rc = field(m, "reasoning_content");
            bool reasoning_is_string = true;
            if (rc != nullptr && !rc->is_null()) {
                if (rc->is_string()) reasoning = rc->get<std::string>();
                else reasoning_is_string = false;
            } else if (content.find("</think>") != std::string::npos) {
                const std::string whole = content;
                content = std::string(strip_chars(last_part(whole, "</think>"), "\n", true, false));
                reasoning = std::string(strip_chars(
                    last_part(std::string(strip_chars(first_part(whole, "</think>"), "\n", false, true)), "<think>"),
                    "\n", true, false));
            }
            const bool has_reasoning = reasoning_is_string ? !reasoning.empty() : truthy(rc);
            if (i > last_query && (last || has_reasoning)) {
                if (!reasoning_is_string)
                    return invalid_argument("chat template: messages[" + std::to_string(i) + "].reasoning_content must be a string");
                out += "<|im_start|>" + role + "\n<think>\n" +
                       std::string(strip_chars(reasoning, "\n", true, true)) + "\n</think>\n\n" +
                       std::string(strip_chars(content, "\n", true, false));
            } else {
                out += "<|im_start|>" + role + "\n" + content;
            }
            if (truthy(field(m, "tool_calls"))) QS_RETURN_IF_ERROR(render_tool_calls(m["tool_calls"], content, i, out));
            out += "<|im_end|>\n";
        } else if (role == "tool") {
            if (i == 0 || messages[i - 1]["role"] != "tool") out += "<|im_start|>user";
            std::string content;
            const Json* c = field(m, "content");
            if (c == nullptr || !python_str(*c, content))
                return invalid_argument("chat template: messages[" + std::to_string(i) + "].content of a tool message must be a string");
            out += "\n<tool_response>\n" + content + "\n</tool_response>";
            if (last || messages[i + 1]["role"] != "tool") out += "<|im_end|>\n";
        }
    }
    if (options.add_generation_prompt) {
        out += "<|im_start|>assistant\n";
        if (!options.enable_thinking) out += "<think>\n\n</think>\n\n";
    }
    return out;
}

}  // namespace qs::tok

// Streaming tool-call extraction (see tool_call_parser.h).
#include "tokenizer/tool_call_parser.h"

#include "tokenizer/python_format.h"

namespace qs::tok {

namespace {
using Json = nlohmann::ordered_json;
constexpr std::string_view kOpen = "<tool_call>";
constexpr std::string_view kClose = "</tool_call>";
constexpr std::string_view kFunction = "<function=";
constexpr std::string_view kFunctionEnd = "</function>";
constexpr std::string_view kParameter = "<parameter=";
constexpr std::string_view kParameterEnd = "</parameter>";
constexpr const char* kSpace = " \t\r\n";

size_t partial_tag_suffix(std::string_view s, std::string_view tag) {
    for (size_t n = std::min(s.size(), tag.size() - 1); n > 0; --n)
        if (s.substr(s.size() - n) == tag.substr(0, n)) return n;
    return 0;
}

std::string_view trim(std::string_view s) {
    const size_t b = s.find_first_not_of(kSpace);
    if (b == std::string_view::npos) return {};
    return s.substr(b, s.find_last_not_of(kSpace) - b + 1);
}
}  // namespace

Json ToolCallChunk::to_json() const {
    Json j;
    j["index"] = index;
    if (!id.empty()) {
        j["id"] = id;
        j["type"] = "function";
    }
    Json fn = Json::object();
    if (!name.empty()) fn["name"] = name;
    fn["arguments"] = arguments;
    j["function"] = fn;
    return j;
}

ToolCallParser::ToolCallParser(ToolCallFormat format, ToolSchemas schemas)
    : format_(format), schemas_(std::move(schemas)), rng_(std::random_device{}()) {}

std::string ToolCallParser::new_id() {
    static constexpr char kAlphabet[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
    std::string id = "call_";
    for (int i = 0; i < 24; ++i) id += kAlphabet[rng_() % (sizeof(kAlphabet) - 1)];
    return id;
}

bool ToolCallParser::parse_xml(const std::string& block, ToolCall& call) const {
    std::string_view s = trim(block);
    if (s.substr(0, kFunction.size()) != kFunction) return false;
    s.remove_prefix(kFunction.size());
    const size_t gt = s.find('>');
    if (gt == std::string_view::npos) return false;
    call.name = std::string(trim(s.substr(0, gt)));
    if (call.name.empty() || call.name.find_first_of("<\n") != std::string::npos) return false;
    s.remove_prefix(gt + 1);
    Json args = Json::object();
    for (;;) {
        s = s.substr(std::min(s.size(), s.find_first_not_of(kSpace)));
        if (s.empty()) break;  // tolerated: </function> missing before </tool_call>
        if (s.substr(0, kFunctionEnd.size()) == kFunctionEnd) {
            if (!trim(s.substr(kFunctionEnd.size())).empty()) return false;
            break;
        }
        if (s.substr(0, kParameter.size()) != kParameter) return false;
        s.remove_prefix(kParameter.size());
        const size_t pgt = s.find('>');
        if (pgt == std::string_view::npos) return false;
        const std::string param(trim(s.substr(0, pgt)));
        if (param.empty()) return false;
        s.remove_prefix(pgt + 1);
        // The value runs to </parameter>, or (tolerated) to the next parameter or </function>.
        size_t end = s.find(kParameterEnd);
        size_t skip = kParameterEnd.size();
        for (std::string_view stop : {kParameter, kFunctionEnd}) {
            const size_t at = s.find(stop);
            if (at < end) {
                end = at;
                skip = 0;
            }
        }
        std::string_view value = s.substr(0, end);
        if (!value.empty() && value.front() == '\n') value.remove_prefix(1);
        if (!value.empty() && value.back() == '\n') value.remove_suffix(1);
        args[param] = schemas_.convert(call.name, param, std::string(value));
        s.remove_prefix(end == std::string_view::npos ? s.size() : end + skip);
    }
    call.arguments = python_json_dumps(args);
    return true;
}

bool ToolCallParser::parse_json(const std::string& block, ToolCall& call) const {
    Json j = Json::parse(trim(block), nullptr, false);
    if (j.is_discarded() || !j.is_object() || !j.contains("name") || !j["name"].is_string()) return false;
    call.name = j["name"].get<std::string>();
    if (call.name.empty()) return false;  // as the XML form: a call needs a name
    const Json args = j.contains("arguments") ? j["arguments"]
                      : j.contains("parameters") ? j["parameters"] : Json::object();
    if (args.is_string()) {
        Json parsed = Json::parse(args.get<std::string>(), nullptr, false);
        if (parsed.is_discarded() || !parsed.is_object()) return false;
        call.arguments = python_json_dumps(parsed);
    } else if (args.is_object()) {
        call.arguments = python_json_dumps(args);
    } else {
        return false;
    }
    return true;
}

bool ToolCallParser::parse_block(const std::string& block, ToolCall& call) const {
    return format_ == ToolCallFormat::kQwen35Xml ? parse_xml(block, call) : parse_json(block, call);
}

void ToolCallParser::emit_call(ToolCall call, ToolParseDelta& out) {
    call.id = new_id();
    const int index = static_cast<int>(calls_.size());
    out.tool_calls.push_back(ToolCallChunk{index, call.id, call.name, ""});
    out.tool_calls.push_back(ToolCallChunk{index, "", "", call.arguments});
    calls_.push_back(std::move(call));
}

void ToolCallParser::step(ToolParseDelta& out, bool final) {
    for (;;) {
        if (in_call_) {
            const size_t close = buffer_.find(kClose);
            if (close == std::string::npos && !final) return;
            const std::string block = buffer_.substr(0, close);
            ToolCall call;
            const bool complete = close != std::string::npos ||
                                  (format_ == ToolCallFormat::kQwen35Xml && block.find(kFunctionEnd) != std::string::npos);
            if (complete && parse_block(block, call)) {
                emit_call(std::move(call), out);
            } else {  // malformed or truncated: the model's text is the answer
                out.content += std::string(kOpen) + block + (close == std::string::npos ? "" : std::string(kClose));
            }
            buffer_.erase(0, close == std::string::npos ? buffer_.size() : close + kClose.size());
            in_call_ = false;
            continue;
        }
        const size_t open = buffer_.find(kOpen);
        // After a call, whitespace between or after calls is not content.
        const bool after_call = !calls_.empty();
        if (open != std::string::npos) {
            const std::string before = buffer_.substr(0, open);
            if (!(after_call && trim(before).empty())) out.content += before;
            buffer_.erase(0, open + kOpen.size());
            in_call_ = true;
            continue;
        }
        const size_t hold = final ? 0 : partial_tag_suffix(buffer_, kOpen);
        if (after_call && trim(std::string_view(buffer_).substr(0, buffer_.size() - hold)).empty()) {
            if (final) buffer_.clear();
            return;
        }
        out.content += buffer_.substr(0, buffer_.size() - hold);
        buffer_.erase(0, buffer_.size() - hold);
        return;
    }
}

ToolParseDelta ToolCallParser::feed(std::string_view text) {
    buffer_.append(text);
    ToolParseDelta out;
    step(out, false);
    return out;
}

ToolParseDelta ToolCallParser::finish() {
    ToolParseDelta out;
    step(out, true);
    return out;
}

}  // namespace qs::tok

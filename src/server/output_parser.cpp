// The Qwen reasoning / tool-call splitter (see output_parser.h). A small state machine over a
// buffer of undecided text; no regexes, so a delta costs time proportional to its length plus the
// held-back tail.
#include "server/output_parser.h"

#include <fmt/format.h>

#include <atomic>
#include <nlohmann/json.hpp>
#include <random>

namespace qs {

namespace {

constexpr std::string_view kThinkOpen = "<think>";
constexpr std::string_view kThinkClose = "</think>";
constexpr std::string_view kToolOpen = "<tool_call>";
constexpr std::string_view kToolClose = "</tool_call>";

bool is_space(char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }

std::string_view trim(std::string_view s) {
    while (!s.empty() && is_space(s.front())) s.remove_prefix(1);
    while (!s.empty() && is_space(s.back())) s.remove_suffix(1);
    return s;
}

// Length of the longest suffix of `text` that is a proper prefix of `tag`.
size_t partial_tag_suffix(std::string_view text, std::string_view tag) {
    for (size_t n = std::min(text.size(), tag.size() - 1); n > 0; --n)
        if (text.substr(text.size() - n) == tag.substr(0, n)) return n;
    return 0;
}

std::string dump_json(const nlohmann::json& j) {
    return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

// {"name": ..., "arguments": {...}} (Qwen3).
bool parse_json_tool_call(std::string_view body, ToolCall& out) {
    auto j = nlohmann::json::parse(body, nullptr, false);
    if (j.is_discarded() || !j.is_object() || !j.contains("name") || !j["name"].is_string()) return false;
    out.name = j["name"].get<std::string>();
    if (out.name.empty()) return false;  // not a call a client could dispatch: left as text
    const auto args = j.contains("arguments") ? j["arguments"] : nlohmann::json::object();
    out.arguments = args.is_string() ? args.get<std::string>() : dump_json(args);
    return true;
}

// <function=NAME><parameter=P>VALUE</parameter>...</function> (Qwen3.5/3.6). A value that parses
// as JSON (number, bool, object, array) is kept as such, anything else is a string.
bool parse_xml_tool_call(std::string_view body, ToolCall& out) {
    constexpr std::string_view kFn = "<function=";
    constexpr std::string_view kParam = "<parameter=";
    constexpr std::string_view kParamEnd = "</parameter>";
    if (body.substr(0, kFn.size()) != kFn) return false;
    size_t name_end = body.find('>');
    if (name_end == std::string_view::npos) return false;
    out.name = std::string(trim(body.substr(kFn.size(), name_end - kFn.size())));
    if (out.name.empty()) return false;
    nlohmann::ordered_json args = nlohmann::ordered_json::object();
    size_t pos = name_end + 1;
    while (true) {
        size_t p = body.find(kParam, pos);
        if (p == std::string_view::npos) break;
        size_t pname_end = body.find('>', p);
        if (pname_end == std::string_view::npos) return false;
        std::string pname(trim(body.substr(p + kParam.size(), pname_end - p - kParam.size())));
        size_t vend = body.find(kParamEnd, pname_end);
        if (vend == std::string_view::npos) return false;
        std::string_view value = body.substr(pname_end + 1, vend - pname_end - 1);
        if (!value.empty() && value.front() == '\n') value.remove_prefix(1);
        if (!value.empty() && value.back() == '\n') value.remove_suffix(1);
        auto parsed = nlohmann::ordered_json::parse(value, nullptr, false);
        if (!parsed.is_discarded() && !parsed.is_string())
            args[pname] = parsed;
        else
            args[pname] = std::string(value);
        pos = vend + kParamEnd.size();
    }
    out.arguments = args.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    return true;
}

class QwenOutputParser final : public OutputParser {
public:
    explicit QwenOutputParser(const OutputParserOptions& o)
        : opts_(o), mode_(o.starts_in_reasoning && o.parse_reasoning ? Mode::kReasoning : Mode::kContent) {}

    ParsedDelta feed(std::string_view text) override {
        ParsedDelta d;
        buf_.append(text);
        while (step(d)) {}
        return d;
    }

    ParsedDelta finish() override {
        ParsedDelta d;
        switch (mode_) {
            case Mode::kReasoning: d.reasoning += buf_; break;
            case Mode::kContent: emit_content(d, buf_, /*final=*/true); break;
            case Mode::kToolCall: emit_content(d, ws_before_tool_ + std::string(kToolOpen) + buf_, /*final=*/true); break;
        }
        if (!saw_tool_call_ && !ws_hold_.empty()) d.content += ws_hold_;
        ws_hold_.clear();
        buf_.clear();
        return d;
    }

private:
    enum class Mode { kReasoning, kContent, kToolCall };

    // Consumes what can be decided from buf_; returns true if another step may make progress.
    bool step(ParsedDelta& d) {
        if (mode_ == Mode::kReasoning) {
            size_t p = buf_.find(kThinkClose);
            if (p != std::string::npos) {
                d.reasoning.append(buf_, 0, p);
                buf_.erase(0, p + kThinkClose.size());
                mode_ = Mode::kContent;
                strip_leading_ = true;
                return true;
            }
            size_t keep = partial_tag_suffix(buf_, kThinkClose);
            d.reasoning.append(buf_, 0, buf_.size() - keep);
            buf_.erase(0, buf_.size() - keep);
            return false;
        }
        if (mode_ == Mode::kToolCall) {
            size_t p = buf_.find(kToolClose);
            if (p == std::string::npos) return false;
            std::string_view body = trim(std::string_view(buf_).substr(0, p));
            ToolCall call;
            if (parse_json_tool_call(body, call) || parse_xml_tool_call(body, call)) {
                call.id = new_tool_call_id();
                d.tool_calls.push_back(std::move(call));
                saw_tool_call_ = true;
                ws_hold_.clear();
            } else {
                emit_content(d, ws_before_tool_ + std::string(kToolOpen) + buf_.substr(0, p + kToolClose.size()), false);
            }
            ws_before_tool_.clear();
            buf_.erase(0, p + kToolClose.size());
            mode_ = Mode::kContent;
            strip_leading_ = true;
            return true;
        }
        // Content: look for the earliest tag that switches mode.
        if (strip_leading_) {
            size_t n = 0;
            while (n < buf_.size() && is_space(buf_[n])) ++n;
            buf_.erase(0, n);
            if (buf_.empty()) return false;
            strip_leading_ = false;
        }
        const bool think_allowed = opts_.parse_reasoning && !emitted_content_ && !saw_think_;
        size_t p_tool = opts_.parse_tool_calls ? buf_.find(kToolOpen) : std::string::npos;
        size_t p_think = think_allowed ? buf_.find(kThinkOpen) : std::string::npos;
        if (p_think != std::string::npos && (p_tool == std::string::npos || p_think < p_tool) &&
            trim(std::string_view(buf_).substr(0, p_think)).empty()) {
            buf_.erase(0, p_think + kThinkOpen.size());
            saw_think_ = true;
            mode_ = Mode::kReasoning;
            return true;
        }
        if (p_tool != std::string::npos) {
            emit_content(d, buf_.substr(0, p_tool), false);
            ws_before_tool_ = std::move(ws_hold_);  // formatting, unless the call fails to parse
            ws_hold_.clear();
            buf_.erase(0, p_tool + kToolOpen.size());
            mode_ = Mode::kToolCall;
            return true;
        }
        size_t keep = 0;
        if (opts_.parse_tool_calls) keep = std::max(keep, partial_tag_suffix(buf_, kToolOpen));
        if (think_allowed) keep = std::max(keep, partial_tag_suffix(buf_, kThinkOpen));
        emit_content(d, buf_.substr(0, buf_.size() - keep), false);
        buf_.erase(0, buf_.size() - keep);
        return false;
    }

    // Content goes out with its trailing whitespace held back (dropped if a tool call follows).
    void emit_content(ParsedDelta& d, std::string text, bool final) {
        if (text.empty()) return;
        size_t end = text.size();
        if (!final) {
            while (end > 0 && is_space(text[end - 1])) --end;
        }
        if (end > 0) {
            if (!saw_tool_call_ || !trim(text).empty()) {
                d.content += ws_hold_;
                d.content.append(text, 0, end);
                emitted_content_ = true;
            }
            ws_hold_.clear();
        }
        ws_hold_.append(text, end, std::string::npos);
    }

    OutputParserOptions opts_;
    Mode mode_;
    std::string buf_;      // undecided text
    std::string ws_hold_;  // trailing whitespace of content, not yet sent
    std::string ws_before_tool_;  // whitespace held when a tool call opened
    bool strip_leading_ = false;
    bool emitted_content_ = false;
    bool saw_think_ = false;
    bool saw_tool_call_ = false;
};

}  // namespace

std::unique_ptr<OutputParser> make_qwen_output_parser(const OutputParserOptions& options) {
    return std::make_unique<QwenOutputParser>(options);
}

std::string new_tool_call_id() {
    static std::atomic<uint64_t> counter{std::random_device{}() * 0x9E3779B97F4A7C15ull};
    const uint64_t x = counter.fetch_add(0x9E3779B97F4A7C15ull, std::memory_order_relaxed);
    return fmt::format("call_{:016x}{:08x}", x, uint32_t(x >> 17) ^ 0x5bd1e995u);
}

}  // namespace qs

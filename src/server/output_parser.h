// Splits a completion's generated text, fed in deltas as the engine streams it, into reasoning,
// content and tool calls. Qwen's output conventions: reasoning ends at "</think>" (the template
// may already have opened "<think>"), tool calls are "<tool_call>BODY</tool_call>" where BODY is
// either JSON {"name", "arguments"} (Qwen3) or XML "<function=NAME><parameter=P>V</parameter>
// </function>" (Qwen3.5/3.6). Text that might be the start of a tag is held back until it is
// decided. A tool call is emitted whole once its closing tag arrives.
// One instance per completion; used on one connection strand only.
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

namespace qs {

struct ToolCall {
    std::string id;         // "call_..."
    std::string name;
    std::string arguments;  // a JSON object as text
};

struct ParsedDelta {
    std::string reasoning;
    std::string content;
    std::vector<ToolCall> tool_calls;
    bool empty() const { return reasoning.empty() && content.empty() && tool_calls.empty(); }
};

struct OutputParserOptions {
    nlohmann::ordered_json tools;      // the request's tools (schemas type XML parameters)
    bool starts_in_reasoning = false;  // the prompt opened <think>
    bool parse_reasoning = true;       // false: "<think>" is ordinary content
    bool parse_tool_calls = false;     // false: "<tool_call>" is ordinary content
};

class OutputParser {
public:
    virtual ~OutputParser() = default;
    virtual ParsedDelta feed(std::string_view text) = 0;
    // End of generation: flushes held-back text (an unterminated tool call becomes content).
    virtual ParsedDelta finish() = 0;
};

// The Qwen conventions described above.
std::unique_ptr<OutputParser> make_qwen_output_parser(const OutputParserOptions& options);

// Fresh "call_<24 hex>" ids, unique within the process.
std::string new_tool_call_id();

}  // namespace qs

// Extracts tool calls from a model's answer text (after reasoning is split off) as it streams.
//   kQwen35Xml  Qwen3.5/3.6 (vLLM "qwen3_coder"): <tool_call><function=NAME><parameter=P>
//               value</parameter>...</function></tool_call>; values typed by the tool schema.
//   kQwen3Json  Qwen3 (Hermes style): <tool_call>{"name": ..., "arguments": {...}}</tool_call>.
// Several calls per answer. Text outside calls is content. A call is released only when its
// block is complete and parses, as two chunks in OpenAI's delta.tool_calls shape (id + name,
// then the arguments JSON), so a malformed or truncated block is never half-reported: its raw
// text comes back as content instead. One instance per sequence.
#pragma once

#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/tool_schema.h"

namespace qs::tok {

enum class ToolCallFormat { kQwen35Xml, kQwen3Json };

struct ToolCall {
    std::string id;
    std::string name;
    std::string arguments;  // JSON object text
};

// One element of an OpenAI chat.completion.chunk's delta.tool_calls.
struct ToolCallChunk {
    int index = 0;
    std::string id;         // first chunk of a call only
    std::string name;       // first chunk of a call only
    std::string arguments;  // a fragment of the arguments JSON text
    nlohmann::ordered_json to_json() const;
};

struct ToolParseDelta {
    std::string content;
    std::vector<ToolCallChunk> tool_calls;
};

class ToolCallParser {
public:
    ToolCallParser(ToolCallFormat format, ToolSchemas schemas);

    ToolParseDelta feed(std::string_view text);
    // End of output: releases held text; an unfinished call block becomes content.
    ToolParseDelta finish();
    // Every call completed so far.
    const std::vector<ToolCall>& calls() const { return calls_; }

private:
    bool parse_block(const std::string& block, ToolCall& call) const;
    bool parse_xml(const std::string& block, ToolCall& call) const;
    bool parse_json(const std::string& block, ToolCall& call) const;
    void emit_call(ToolCall call, ToolParseDelta& out);
    void step(ToolParseDelta& out, bool final);
    std::string new_id();

    ToolCallFormat format_;
    ToolSchemas schemas_;
    std::vector<ToolCall> calls_;
    std::string buffer_;
    bool in_call_ = false;
    std::mt19937_64 rng_;
};

}  // namespace qs::tok

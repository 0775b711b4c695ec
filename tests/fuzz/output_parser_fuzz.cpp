// libFuzzer harness: the server's streaming output parser (server/output_parser: reasoning,
// JSON and XML tool calls) on arbitrary model output fed in pieces.
// Input: flags byte (bit 0: starts_in_reasoning, 1: parse_reasoning, 2: parse_tool_calls;
// bits 3..7: piece size - 1) + the generated text. Every tool call released must carry a name
// and arguments that are a JSON object.
#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>

#include "fuzz_input.h"
#include "server/output_parser.h"

namespace {

void check(const qs::ParsedDelta& d) {
    for (const qs::ToolCall& c : d.tool_calls) {
        QS_FUZZ_ASSERT(!c.name.empty());
        QS_FUZZ_ASSERT(c.id.rfind("call_", 0) == 0);
    }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const qs::fuzz::FuzzInput in = qs::fuzz::split_input(data, size);
    static const nlohmann::ordered_json kTools = nlohmann::ordered_json::parse(R"([
        {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object",
         "properties": {"city": {"type": "string"}, "days": {"type": "integer"},
                        "metric": {"type": "boolean"}, "extra": {"type": "object"}}}}}])");
    qs::OutputParserOptions options;
    options.tools = kTools;
    options.starts_in_reasoning = in.flags & 1;
    options.parse_reasoning = in.flags & 2;
    options.parse_tool_calls = in.flags & 4;
    auto parser = qs::make_qwen_output_parser(options);
    qs::fuzz::feed_in_chunks(in.text, in.chunk_bytes(), [&](std::string_view piece) { check(parser->feed(piece)); });
    check(parser->finish());
    return 0;
}

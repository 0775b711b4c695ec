// libFuzzer harness: the tokenizer's streaming parsers (tokenizer/reasoning_parser, then
// tokenizer/tool_call_parser on the answer) on arbitrary model output fed in pieces.
// Input: flags byte (bit 0: starts_in_reasoning, 1: Qwen3 JSON calls instead of Qwen3.5 XML;
// bits 3..7: piece size - 1) + the generated text, made valid UTF-8 first (utf8_repair) as the
// detokenizer's output always is. Every completed call must have a name and arguments that
// parse as a JSON object, and the chunks must number the calls 0, 1, ...
#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>

#include "fuzz_input.h"
#include "tokenizer/reasoning_parser.h"
#include "tokenizer/tool_call_parser.h"
#include "tokenizer/unicode.h"

namespace {

void check(const qs::tok::ToolParseDelta& d, int* next_index) {
    for (const qs::tok::ToolCallChunk& c : d.tool_calls) {
        QS_FUZZ_ASSERT(c.index == *next_index || c.index == *next_index - 1);
        if (!c.name.empty()) *next_index = c.index + 1;
        (void)c.to_json().dump();
    }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const qs::fuzz::FuzzInput in = qs::fuzz::split_input(data, size);
    static const qs::tok::ToolSchemas kSchemas = qs::tok::ToolSchemas::from_text(R"([
        {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object",
         "properties": {"city": {"type": "string"}, "days": {"type": "integer"},
                        "temp": {"type": "number"}, "metric": {"type": "boolean"},
                        "extra": {"type": "object"}, "list": {"type": "array"}}}}}])").value();
    qs::tok::ReasoningParser reasoning(in.flags & 1);
    qs::tok::ToolCallParser tools(
        (in.flags & 2) ? qs::tok::ToolCallFormat::kQwen3Json : qs::tok::ToolCallFormat::kQwen35Xml, kSchemas);
    int next_index = 0;
    const std::string text = qs::tok::utf8_repair(in.text);
    qs::fuzz::feed_in_chunks(text, in.chunk_bytes(), [&](std::string_view piece) {
        qs::tok::ReasoningDelta r = reasoning.feed(piece);
        check(tools.feed(r.content), &next_index);
    });
    check(tools.feed(reasoning.finish().content), &next_index);
    check(tools.finish(), &next_index);
    for (const qs::tok::ToolCall& call : tools.calls()) {
        QS_FUZZ_ASSERT(!call.name.empty());
        auto args = nlohmann::json::parse(call.arguments, nullptr, /*allow_exceptions=*/false);
        QS_FUZZ_ASSERT(!args.is_discarded() && args.is_object());
    }
    QS_FUZZ_ASSERT(int(tools.calls().size()) == next_index);
    return 0;
}

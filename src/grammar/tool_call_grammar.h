// The grammar of tool_choice "required" or a named function: the model's tool-call syntax
// with each call's arguments typed by the tool's JSON schema, as an xgrammar structural tag.
// Qwen3.5/3.6 XML (what tokenizer/tool_call_parser reads, vLLM's qwen3_coder):
//   <tool_call>\n<function=NAME>\n<parameter=P>VALUE</parameter>...\n</function>\n</tool_call>
// (string values raw, others JSON); Qwen3 JSON: <tool_call>\n{"name": NAME, "arguments": {...}}
// \n</tool_call>. "required": one or more calls of any tool, separated by newlines, nothing
// else; named: exactly one call of that function. Stateless; any thread.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "core/status.h"
#include "grammar/grammar_spec.h"

namespace qs::grammar {

// tools: the request's validated `tools` array; function: the named function, or "" for
// "required"; parallel false: "required" allows exactly one call. Errors name the problem (an
// unknown function name).
Result<GrammarSpec> tool_call_grammar(const nlohmann::ordered_json& tools, const std::string& function, bool xml,
                                      bool parallel = true);

}  // namespace qs::grammar

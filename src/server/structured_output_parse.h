// The request fields that ask for structured outputs (constrained decoding), parsed into the
// GenerationSpec's grammar: response_format json_object / json_schema (OpenAI), vLLM's
// structured_outputs {json, regex, choice, grammar, json_object} and its older guided_json /
// guided_regex / guided_choice / guided_grammar, and tool_choice "required" or a named function
// (openai_parse's parse_tools records those; generation.cpp builds their grammar, which needs
// the model's tool-call format). At most one constraint per request: a second is a 400 naming
// it. Schemas and grammars are compiled later (generation.cpp), where errors are 400s too.
// Stateless; runs on the worker pool.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>

#include "server/api_error.h"
#include "server/openai_parse.h"

namespace qs {

std::optional<ApiError> parse_structured_outputs(const nlohmann::ordered_json& body, GenerationSpec& s);

}  // namespace qs

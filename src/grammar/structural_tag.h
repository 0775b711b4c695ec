// Structural tags as a request sends them (vLLM's response_format {"type": "structural_tag"}
// and structured_outputs.structural_tag) → the xgrammar structural tag the compiler takes.
// Two shapes are accepted, as vLLM accepts them:
//   current: {"type": "structural_tag", "format": FORMAT} (xgrammar's format objects: tag,
//            sequence, or, triggered_tags, tags_with_separator, json_schema, regex, ...);
//   legacy:  {"type": "structural_tag", "structures": [{"begin", "schema", "end"}...],
//            "triggers": [...]}, converted as xgrammar converts it (triggered_tags of tags
//            whose content is the schema; free text outside them).
// Every json_schema inside is checked for keywords xgrammar would drop (schema_check.h) and gets
// the server's whitespace bound unless it sets max_whitespace_cnt. Stateless; any thread.
#pragma once

#include <nlohmann/json.hpp>

#include "core/status.h"
#include "grammar/grammar_spec.h"

namespace qs::grammar {

// Errors (kInvalidArgument) name the problem with a path ("format.tags[0].content.json_schema: ...").
Result<GrammarSpec> structural_tag_grammar(const nlohmann::ordered_json& tag);

}  // namespace qs::grammar

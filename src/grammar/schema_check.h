// The JSON-schema keywords xgrammar's converter does not enforce and does not report (it drops
// them silently, or warns only when verbose): a schema that uses one is refused instead of
// compiled into a looser grammar whose replies could violate it. Stateless; any thread.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>

namespace qs::grammar {

// The first unsupported keyword of `schema` and its subschemas, as "keyword 'K' at PATH"
// (PATH a JSON pointer), or nullopt when there is none.
std::optional<std::string> unsupported_schema_feature(const nlohmann::json& schema);

}  // namespace qs::grammar

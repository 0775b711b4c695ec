// The engine's options (config/engine_options: names, kinds, ranges, help) as a group of a
// command's option table, each with its default from a default EngineConfig. EngineConfig::
// from_args parses and validates them; the table only makes them known and documents them.
#pragma once

#include <string_view>
#include <vector>

#include "cli/option_table.h"

namespace qs::cli {

// Every engine option, or only those named in `only` (logits takes the cache dtypes alone).
OptionGroup engine_option_group(const std::vector<std::string_view>& only = {});

}  // namespace qs::cli

// The engine options' values as text, for people: an option's value in a config (the help's
// defaults come from a default EngineConfig, so they are never written twice), and the config an
// engine really runs with, every automatic value (0) replaced by what the capacity plan made of
// it (the start-up log prints that one).
#pragma once

#include <string>
#include <string_view>

#include "engine/engine_config.h"

namespace qs {

// The value of option `name` (config/engine_options, without "--") in `config`: "512", "0.9",
// "bf16"; for an off switch "1" when the feature is off, else "0". Asking for an option that is
// not in the table is a bug (QS_CHECK).
std::string engine_option_value(const EngineConfig& config, std::string_view name);

// `config` with max_model_len, num_state_snapshots and num_kv_blocks as `plan` resolved them.
EngineConfig with_resolved_sizes(const EngineConfig& config, const CapacityPlan& plan);

}  // namespace qs

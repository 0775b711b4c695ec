// The serving engine's options, declared once: the command-line spelling (`--max-num-seqs`, or
// QS_MAX_NUM_SEQS in the environment), the knob name used in messages and by `campaign sweep`
// (`max_num_seqs`), the kind of value, the values or range allowed, and a line of help.
// EngineConfig (engine/engine_config) parses and validates its fields through this table; the
// sweep (bench/sweep_grid) takes its knob names from it. It sits below both, so src/bench needs
// nothing from src/engine. Defaults are EngineConfig's member initialisers, not repeated here.
// Immutable after first use; any thread.
#pragma once

#include <cstdint>
#include <limits>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace qs {

enum class OptionKind : uint8_t {
    kInt,        // an integer in [min, max]
    kReal,       // a real in [min, max], or (min, max] when min_open
    kChoice,     // one of `choices`, or an alias of one
    kOffSwitch,  // a flag without a value that turns a default-on feature off (--no-prefix-caching)
};

struct OptionAlias {
    std::string_view alias;      // "fp8"
    std::string_view canonical;  // "fp8_e4m3"
};

struct EngineOption {
    std::string_view name;  // without "--": "max-num-seqs", "no-prefix-caching"
    std::string_view knob;  // "max_num_seqs"; an off switch names what it turns off: "prefix_caching"
    OptionKind kind = OptionKind::kInt;
    std::string_view help;
    double min = 0;                                         // kInt, kReal
    double max = std::numeric_limits<double>::infinity();   // kInt, kReal; infinity: no upper bound
    bool min_open = false;                                  // kReal: min itself is not allowed
    std::optional<double> off_value;                        // kReal: also allowed, means "off"
    std::vector<std::string_view> choices;                  // kChoice: canonical values, in message order
    std::vector<OptionAlias> aliases;                       // kChoice: other accepted spellings

    bool takes_value() const { return kind != OptionKind::kOffSwitch; }
};

// Every option, in a fixed order (the order of the table in engine_options.cpp).
const std::vector<EngineOption>& engine_options();
// The option spelled `name` (without "--"). Asking for one that is not in the table is a bug
// (QS_CHECK).
const EngineOption& engine_option(std::string_view name);

// Names for Args::parse.
std::set<std::string> engine_valued_option_names();
std::set<std::string> engine_flag_option_names();

// The option's allowed values in words: ">= 1", "in (0, 1]", "in [0, 1] (or -1: off)" (kInt,
// kReal); empty for the other kinds.
std::string option_range_text(const EngineOption& option);

// `v` against the option's range (its off value passes): "max_num_seqs must be >= 1, got 0",
// "gpu_memory_utilization must be in (0, 1], got 1.5",
// "benchmark_mtp_acceptance must be in [0, 1] (or -1: off), got 2".
Status check_option_range(const EngineOption& option, double v);
// The canonical spelling of a kChoice value (aliases resolved), or an error naming the flag and
// every choice: "--gdn-state-dtype must be 'f32' or 'bf16', got 'fp16'".
Result<std::string_view> canonical_choice(const EngineOption& option, std::string_view value);

}  // namespace qs

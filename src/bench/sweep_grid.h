// The knob grid of `qwenserve campaign sweep`: which server knobs can be swept, how a grid is
// written (repeated `--grid knob=v1,v2` or a grid file) and how it expands into points (the
// cartesian product), each with the `qwenserve serve` arguments that set its values.
// Knobs are the engine's own options, taken from the option table that `serve` parses its engine
// flags with (config/engine_options.h, so the list cannot drift from what `serve` accepts), by
// their knob names: max_num_seqs, max_num_batched_tokens, kv_cache_dtype, num_speculative_tokens,
// cache_memory_mb, ...; the table's off switches are on/off knobs: prefix_caching (off:
// --no-prefix-caching) and chunked_prefill (off: --no-chunked-prefill). A name `serve` does not know is an
// error that lists the known knobs. Values of valued knobs are passed through unchecked: `serve`
// validates them, and a point whose server refuses its values is recorded as failed.
// Grid file: a JSON object {"max_num_seqs": [64, 128], "prefix_caching": [true, false]}, or
// lines "knob = v1, v2" ('#' starts a comment). Pure functions; the CLI's main thread.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "core/status.h"

namespace qs::bench {

struct Knob {
    std::string name;     // "max_num_seqs"
    std::string flag;     // serve option without "--": "max-num-seqs"; on/off: "no-prefix-caching"
    bool on_off = false;  // values are "on"/"off"; "off" adds --flag, "on" adds nothing
};
const std::vector<Knob>& sweep_knobs();  // sorted by name
// Accepts '-' for '_' and, for on/off knobs, the EngineConfig spellings enable_prefix_caching/_chunked_prefill.
Result<const Knob*> find_knob(const std::string& name);

struct GridAxis {
    const Knob* knob = nullptr;
    std::vector<std::string> values;  // on/off knobs: normalised to "on" / "off"
};

struct Grid {
    std::vector<GridAxis> axes;  // in the order given; the first varies slowest
    int64_t num_points() const;
};

// "knob=v1,v2,..." appended as one axis. Errors: unknown knob, a knob given twice, no or
// repeated values, an on/off knob with another value.
Status add_grid_spec(Grid& grid, const std::string& spec);
Status read_grid_file(Grid& grid, const std::string& path);

struct GridPoint {
    std::vector<std::pair<std::string, std::string>> knobs;  // name -> value, axis order
    std::vector<std::string> serve_args;                     // e.g. {"--max-num-seqs", "64"}
    std::string label;  // "max_num_seqs=64,prefix_caching=off"; "default" with no axes
};
std::vector<GridPoint> expand_grid(const Grid& grid);

// The extra `serve` arguments must not set what the sweep sets: a swept knob's flag, --port,
// --host or --model. Errors name the argument.
Status check_serve_args(const Grid& grid, const std::vector<std::string>& serve_args);

}  // namespace qs::bench

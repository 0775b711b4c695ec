// Shared model options of the subcommands: --model DIR | builtin:NAME, --load-format auto|dummy,
// --dummy-format auto|bf16|fp8-block (dummy weights' linears; auto = FP8 when the config has a
// quantization_config), --seed N (dummy weights), --no-mtp, --num-layers N (truncate, for dummy
// experiments), and the backend's: --device cpu|cuda, --cuda-graph-max-batch N (read by
// cli/backend_args.h). The cache dtypes are engine options (EngineConfig::valued_options()).
#pragma once

#include <set>
#include <string>

#include "core/args.h"
#include "model/weights.h"

namespace qs::cli {

// Option names to pass to Args::parse.
const std::set<std::string>& model_flag_options();
const std::set<std::string>& model_valued_options();

// Loads weights as the options say. `builtin:qwen36-35b-a3b` and `builtin:tiny` name configs
// compiled in (dummy weights only).
Result<ModelWeights> load_model_from_args(const Args& args);

// Checks that every id is inside the vocabulary; the message names the index and the id.
Status check_token_ids(const std::vector<int64_t>& ids, int64_t vocab_size);

}  // namespace qs::cli

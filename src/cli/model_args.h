// Shared model options of the subcommands: --model DIR | ORG/NAME | builtin:NAME (ORG/NAME: a
// Hugging Face id in the local hub cache, io/hf_cache.h), --load-format auto|dummy,
// --dummy-format auto|bf16|fp8-block|int4-w4a16 (dummy weights' linears; auto = FP8 when the config has a
// quantization_config), --seed N (dummy weights), --no-mtp, --num-layers N (truncate, for dummy
// experiments), and the backend's: --device cpu|cuda, --cuda-graph-max-batch N (read by
// cli/backend_args.h). The cache dtypes are engine options (cli/engine_option_group.h).
#pragma once

#include <set>
#include <string>

#include "cli/option_table.h"
#include "core/args.h"
#include "model/weights.h"

namespace qs::cli {

// The --model option alone (capacity needs only the config), and every model option.
CliOption model_option();
OptionGroup model_option_group();

// The directory (or builtin:NAME) --model names: a local path as given, a Hugging Face id
// resolved in the local cache; an id that is not there is an error naming what to download.
Result<std::string> model_path_from_args(const Args& args);

// Loads weights as the options say. `builtin:qwen36-35b-a3b` and `builtin:tiny` name configs
// compiled in (dummy weights only).
Result<ModelWeights> load_model_from_args(const Args& args);

// Checks that every id is inside the vocabulary; the message names the index and the id.
Status check_token_ids(const std::vector<int64_t>& ids, int64_t vocab_size);

}  // namespace qs::cli

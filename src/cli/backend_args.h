// Backend options of the model-running subcommands: --device cpu|cuda, --cuda-graph-max-batch N,
// --tensor-parallel-size N (-tp N) and --enable-expert-parallel (serve only, the others refuse N > 1).
// The cache dtypes (--kv-cache-dtype, --gdn-state-dtype) are engine options, parsed once by
// EngineConfig::from_args; the backend takes them from the EngineConfig.
#pragma once

#include <memory>
#include <set>
#include <string>

#include "cli/option_table.h"
#include "core/args.h"
#include "engine/engine_config.h"
#include "model/model_backend.h"

namespace qs::cli {

OptionGroup backend_option_group();
// --tensor-parallel-size, --enable-expert-parallel (serve's; parsed into BackendOptions by
// backend_options_from_args).
OptionGroup parallel_option_group();
// The backend for `engine`'s caches: the GDN state dtype comes from it, and a K/V dtype the
// device cannot store (f32 on the GPU) is refused here, before any GPU is needed.
Result<BackendOptions> backend_options_from_args(const Args& args, const EngineConfig& engine);
// Creates the backend the options name, with the weights prepared for it (one backend: an error
// for --tensor-parallel-size > 1, which serve builds with make_tensor_parallel_runner).
Result<std::unique_ptr<Ops>> make_backend_from_args(const Args& args, const EngineConfig& engine,
                                                    ModelWeights& weights);

}  // namespace qs::cli

// Backend options of the model-running subcommands: --device cpu|cuda, --gdn-state-dtype f32|bf16,
// --cuda-graph-max-batch N.
#pragma once

#include <memory>
#include <set>
#include <string>

#include "backend/make_backend.h"
#include "core/args.h"
#include "model/model_cache.h"

namespace qs::cli {

const std::set<std::string>& backend_valued_options();
Result<BackendOptions> backend_options_from_args(const Args& args);
// Creates the backend the options name, with the weights prepared for it.
Result<std::unique_ptr<Ops>> make_backend_from_args(const Args& args, const ModelWeights& weights);
// K/V storage of the single-sequence tools (logits, generate): exact f32 on the CPU, bf16 on
// the GPU (which has no f32 cache); --kv-cache-dtype overrides.
Result<KvCacheDtype> single_sequence_kv_dtype(const Args& args);

}  // namespace qs::cli

// The derived sizes of an engine on its backend, in one place: on a GPU the cache budget is what
// the device has left once the weights are loaded and a warm-up forward has sized the activation
// arena, less what a step's logits can take (they are not part of the warm-up); then
// max_num_seqs is fitted to the budget (EngineConfig::fitted) and plan_capacity splits it. Used
// by the commands that make an Engine (serve, generate --input), before Engine::create.
#pragma once

#include <cstddef>

#include "backend/ops.h"
#include "core/status.h"
#include "engine/engine_config.h"
#include "model/weights.h"

namespace qs {

// Bytes of the largest step's logits: max_num_seqs sequences × (1 + k) rows (a verify step)
// × vocab_size fp32.
size_t step_logits_bytes(const ModelConfig& model, const EngineConfig& config, bool with_mtp);

// `config` with cache_memory_mb set from the device (GPU, unless `budget_given`) and
// max_num_seqs fitted. On the CPU backend the budget is the flag's (and `ops` may be null: a
// tensor-parallel group's ranks each own theirs). `max_image_rows` > 0 (image input on): the vision
// tower's device memory for an image of that many patch rows is taken before the GPU budget is
// measured (device_cache_budget_mb).
Result<EngineConfig> size_engine(const EngineConfig& config, Ops* ops, const ModelWeights& weights, bool on_gpu,
                                 bool budget_given, int64_t max_image_rows = 0);

}  // namespace qs

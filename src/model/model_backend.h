// The model on a backend: creates the backend a command runs on for these weights and prepares
// them for it (backend/make_backend.h + Ops::prepare_weights), and sizes a GPU's cache by a
// warm-up forward, or spreads them over a tensor-parallel group. Used by the CLI commands, on their main thread before the engine starts.
#pragma once

#include <memory>

#include "backend/make_backend.h"
#include "core/status.h"
#include "model/model_runner.h"
#include "model/weights.h"

namespace qs {

// GPU backends: the cache budget in MB that leaves `utilization` of the device's memory in use
// once the weights are loaded and a warm-up forward of `max_batched_tokens` tokens has sized the
// activation arena. Errors when nothing is left. Not for the CPU backend (its budget is a flag).
// With `max_image_rows` > 0 and a vision tower in `weights`, the tower's weights and the arena of
// a forward over that many patch rows are taken first (Ops::reserve_vision_tower; logged), so the
// cache budget is what is left after them.
Result<int64_t> device_cache_budget_mb(Ops& ops, const ModelWeights& weights, int64_t max_batched_tokens,
                                       double utilization, int64_t max_image_rows = 0);

// Creates the backend and uploads/prepares `weights` for it (they must outlive it; their views
// get the handles the backend files its copies under: backend/weight_handle.h). Errors name
// the problem: unknown device, a build without CUDA, no GPU.
Result<std::unique_ptr<Ops>> make_backend(const BackendOptions& options, ModelWeights& weights);

// The tensor-parallel group of options.tensor_parallel_size ranks (> 1) the engine runs `weights`
// on (they must outlive it): on the CPU backend, one thread per rank with an in-process
// Collective (options.expert_parallel: the routed experts split over the ranks). Errors: a config that does not split over the ranks (naming the field); on CUDA,
// fewer GPUs than ranks, and otherwise that CUDA ranks are not built into serving yet.
Result<std::unique_ptr<ModelRunner>> make_tensor_parallel_runner(const BackendOptions& options,
                                                                 const ModelWeights& weights);

}  // namespace qs

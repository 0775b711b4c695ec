// Tensor parallelism over the ranks of one group (issue 22; docs/ARCHITECTURE.md, "Tensor
// parallel"). Each rank holds a shard of the weights and runs Qwen36Model on it with a
// Collective; the residual stream is replicated and every block's output is summed across ranks:
//   full attention: query heads split (K/V heads split, or replicated when there are fewer K/V
//     heads than ranks); q/k/v_proj by rows, o_proj by columns, then all-reduce;
//   Gated DeltaNet: value heads split with the key heads they read (split or replicated alike);
//     in_proj_qkv and the conv taps by channel, in_proj_z/b/a, A_log, dt_bias by head, out_proj
//     by columns, then all-reduce;
//   MoE: every expert and the shared expert split along the intermediate dimension (gate/up by
//     rows, down by columns; router and shared-expert gate replicated), then all-reduce;
//   lm_head split by vocabulary rows, logits all-gathered; embeddings and norms replicated.
// With expert_parallel the routed experts are split instead: rank r holds experts
// [r·E/N, (r+1)·E/N) whole and the others empty (the backend's moe gives an empty expert's picks
// zero output: only the CPU backend supports it), so the all-reduce sums each token's experts
// from the ranks that hold them; the shared expert stays split by intermediate as above.
// Sharding needs no change to the ops: a rank's shard is an ordinary model of the rank's
// config (fewer heads, a smaller intermediate), which also sizes the rank's cache.
#pragma once

#include "core/status.h"
#include "model/weights.h"

namespace qs {

// The config one of `size` ranks runs (heads and intermediates divided; vocab_size stays the
// whole vocabulary, the logits' width after the gather), or an error naming the field that does
// not split into `size` ranks.
// With expert_parallel, moe_intermediate_size stays whole and num_experts must split.
Result<ModelConfig> shard_config(const ModelConfig& full, int size, bool expert_parallel = false);

// Rank `rank`'s shard of `full` (views into its buffers where the split is contiguous, copies
// where it is not): `full` must outlive the shard.
Result<ModelWeights> shard_weights(const ModelWeights& full, int rank, int size, bool expert_parallel = false);

}  // namespace qs

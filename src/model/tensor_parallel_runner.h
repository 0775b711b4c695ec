// TensorParallelRunner: the engine's ModelRunner over a tensor-parallel group (issue 22;
// docs/ARCHITECTURE.md, "Tensor parallel"). Rank r is a thread (model/rank_threads.h) that owns
// the rank's backend, its shard of the weights (model/tensor_parallel.h) as a Qwen36Model with the
// rank's Collective, and the rank's ModelCache. Every forward, MTP forward, GDN commit and cache
// copy runs on all ranks at once, in the order the engine calls them, so the ranks' collectives
// meet; the runner returns rank 0's Output (every rank holds the whole logits after the gather).
// Sampling runs on rank 0 alone: it needs no collective, the ranks' logits are identical, and
// the tokens reach every rank as the next batch's token ids (each rank writes its own token
// pages in its forward), so the other ranks have nothing to keep in step with.
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "backend/collective.h"
#include "model/model_runner.h"
#include "model/rank_threads.h"

namespace qs {

// How a group's ranks get their backend and Collective. Both are called on rank r's own thread,
// every rank at once (a communicator's set-up may wait for all ranks): make_ops returns the
// rank's backend with `shard` prepared (Ops::prepare_weights), make_collective the rank's
// Collective, which the factory's own state owns (the runner keeps the functions, and so that
// state, until every rank is gone).
struct RankBackendFactory {
    std::function<Result<std::unique_ptr<Ops>>(int rank, ModelWeights& shard)> make_ops;
    std::function<Result<Collective*>(int rank, Ops& ops)> make_collective;
};

class TensorParallelRunner final : public ModelRunner {
public:
    // `full` (the whole model's weights) must outlive the runner: the shards are views into it.
    // Errors: a config that does not split over `size` ranks (naming the field), a rank whose
    // backend or collective could not be made.
    // expert_parallel: the routed experts are split over the ranks instead of their intermediate
    // (model/tensor_parallel.h; CPU backends only).
    static Result<std::unique_ptr<TensorParallelRunner>> create(const ModelWeights& full, int size,
                                                                RankBackendFactory factory,
                                                                bool expert_parallel = false);
    ~TensorParallelRunner() override;

    int size() const { return threads_.size(); }
    int num_ranks() const override { return size(); }

    std::unique_ptr<ModelCache> make_cache(const CacheGeometry& g) override;
    Output forward(const ForwardBatch& batch, ModelCache& cache, bool want_hidden, Output recycled) override;
    Output mtp_forward(const ForwardBatch& batch, const float* hidden, int64_t num_hidden_rows,
                       const std::vector<int32_t>& hidden_rows, ModelCache& cache, bool want_hidden,
                       Output recycled) override;
    void commit_deferred_state(const ForwardBatch& commit, const std::vector<int32_t>& deferred_rows,
                               ModelCache& cache) override;
    void reserve_mtp_hidden(int64_t max_rows, int64_t max_mtp_rows) override;
    // Rank 0's ids (every rank computed the same argmax; the others' are dropped: a rank's next
    // argmax_rows_start replaces its unread one).
    void take_argmax(Output& out) override;
    void sample(float* logits, int64_t V, const SamplingBatch& batch, ModelCache& cache, SampleOutput& out) override;
    UploadMemory& upload_memory() override;  // rank 0's, which samples
    std::vector<int64_t> graph_batch_sizes() const override { return graph_batch_sizes_; }
    bool supports_mrope() const override { return supports_mrope_; }
    // The ranks' backends live on their threads: images go through the host reference tower.
    Ops* vision_ops() override { return nullptr; }

private:
    struct Rank;
    class GroupStorage;
    TensorParallelRunner(int size, RankBackendFactory factory);
    Status init_rank(int r);
    void check_cache(const ModelCache& cache) const;

    RankBackendFactory factory_;  // first: the collectives it owns outlive the ranks
    std::vector<std::unique_ptr<Rank>> ranks_;
    RankThreads threads_;
    const ModelCache* cache_ = nullptr;  // the group cache make_cache returned
    std::vector<int64_t> graph_batch_sizes_;
    bool supports_mrope_ = false;
};

}  // namespace qs

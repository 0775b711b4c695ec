// ModelRunner: what the engine runs the model through — its forwards, the draws over their
// logits and its cache — so the engine does not know whether one backend or a tensor-parallel
// group (model/tensor_parallel_runner.h) computes them. LocalModelRunner is the one-backend case:
// Qwen36Model and Ops, called directly. Outputs, device pointers and the cache are the ones
// Qwen36Model and Ops define (model/qwen36.h, backend/ops.h). Engine thread.
#pragma once

#include <memory>
#include <vector>

#include "backend/ops.h"
#include "model/qwen36.h"

namespace qs {

class ModelRunner {
public:
    using Output = Qwen36Model::Output;
    virtual ~ModelRunner() = default;

    // The cache the forwards below take: one per runner, made before the first forward.
    virtual std::unique_ptr<ModelCache> make_cache(const CacheGeometry& g) = 0;
    // Qwen36Model::forward, mtp_forward (backend-memory hidden: an Output's device_hidden that
    // this runner returned), commit_deferred_state and reserve_mtp_hidden.
    virtual Output forward(const ForwardBatch& batch, ModelCache& cache, bool want_hidden, Output recycled) = 0;
    virtual Output mtp_forward(const ForwardBatch& batch, const float* hidden, int64_t num_hidden_rows,
                               const std::vector<int32_t>& hidden_rows, ModelCache& cache, bool want_hidden,
                               Output recycled) = 0;
    virtual void commit_deferred_state(const ForwardBatch& commit, const std::vector<int32_t>& deferred_rows,
                                       ModelCache& cache) = 0;
    virtual void reserve_mtp_hidden(int64_t max_rows, int64_t max_mtp_rows) = 0;
    // Qwen36Model::take_argmax of an Output this runner returned (a deferred draft argmax).
    virtual void take_argmax(Output& out) = 0;
    // Ops::sample over `logits`, the device_logits of the last forward this runner returned.
    virtual void sample(float* logits, int64_t V, const SamplingBatch& batch, ModelCache& cache, SampleOutput& out) = 0;
    // Ops::upload_memory of the backend that runs sample(): where a SamplingBatch's bitmask goes.
    virtual UploadMemory& upload_memory() = 0;
    // Ops::graph_batch_sizes and Ops::supports_mrope of the backend (rank 0's in a group).
    virtual std::vector<int64_t> graph_batch_sizes() const = 0;
    virtual bool supports_mrope() const = 0;
    // The backend that runs Ops::vision_tower for a request's images (on the submitting thread);
    // null: the host reference (prepare_prompt_images).
    virtual Ops* vision_ops() = 0;
    // Ranks of a tensor-parallel group the forwards run on (1: one backend).
    virtual int num_ranks() const { return 1; }
};

// One model on one backend. `weights` and `ops` must outlive the runner.
class LocalModelRunner final : public ModelRunner {
public:
    LocalModelRunner(const ModelWeights& weights, Ops& ops) : ops_(ops), model_(weights, ops) {}

    std::unique_ptr<ModelCache> make_cache(const CacheGeometry& g) override { return ops_.make_cache(g); }
    Output forward(const ForwardBatch& batch, ModelCache& cache, bool want_hidden, Output recycled) override {
        return model_.forward(batch, cache, want_hidden, std::move(recycled));
    }
    Output mtp_forward(const ForwardBatch& batch, const float* hidden, int64_t num_hidden_rows,
                       const std::vector<int32_t>& hidden_rows, ModelCache& cache, bool want_hidden,
                       Output recycled) override {
        return model_.mtp_forward(batch, hidden, num_hidden_rows, hidden_rows, cache, want_hidden, std::move(recycled));
    }
    void commit_deferred_state(const ForwardBatch& commit, const std::vector<int32_t>& deferred_rows,
                               ModelCache& cache) override {
        model_.commit_deferred_state(commit, deferred_rows, cache);
    }
    void take_argmax(Output& out) override { model_.take_argmax(out); }
    void reserve_mtp_hidden(int64_t max_rows, int64_t max_mtp_rows) override {
        model_.reserve_mtp_hidden(max_rows, max_mtp_rows);
    }
    void sample(float* logits, int64_t V, const SamplingBatch& batch, ModelCache& cache, SampleOutput& out) override {
        ops_.sample(logits, V, batch, cache, out);
    }
    UploadMemory& upload_memory() override { return ops_.upload_memory(); }
    std::vector<int64_t> graph_batch_sizes() const override { return ops_.graph_batch_sizes(); }
    bool supports_mrope() const override { return ops_.supports_mrope(); }
    Ops* vision_ops() override { return &ops_; }

private:
    Ops& ops_;
    Qwen36Model model_;
};

}  // namespace qs

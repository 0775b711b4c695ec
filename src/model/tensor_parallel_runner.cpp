// TensorParallelRunner (see tensor_parallel_runner.h).
#include "model/tensor_parallel_runner.h"

#include <fmt/format.h>

#include "core/check.h"
#include "model/tensor_parallel.h"

namespace qs {

struct TensorParallelRunner::Rank {
    ModelWeights shard;
    std::unique_ptr<Ops> ops;
    Collective* comm = nullptr;
    std::unique_ptr<Qwen36Model> model;
    std::unique_ptr<ModelCache> cache;
    // Ranks > 0: their last forward's and MTP forward's Outputs (rank 0's go to the engine and
    // come back as `recycled`). Every rank: the hidden states those left in its backend's memory.
    Output forward_out{}, mtp_out{};
    const float* forward_hidden = nullptr;
    const float* mtp_hidden = nullptr;
};

// The group cache's slot and page copies, run on every rank's own cache.
class TensorParallelRunner::GroupStorage final : public CacheStorage {
public:
    explicit GroupStorage(TensorParallelRunner& g) : g_(g) {}
    void reset_slot(int64_t slot) override {
        g_.threads_.run_all([&](int r) { g_.ranks_[size_t(r)]->cache->reset_slot(slot); });
    }
    void copy_slot(int64_t from, int64_t to) override {
        g_.threads_.run_all([&](int r) { g_.ranks_[size_t(r)]->cache->copy_slot(from, to); });
    }
    void copy_block(int64_t from, int64_t to) override {
        g_.threads_.run_all([&](int r) { g_.ranks_[size_t(r)]->cache->copy_block(from, to); });
    }

private:
    TensorParallelRunner& g_;
};

TensorParallelRunner::TensorParallelRunner(int size, RankBackendFactory factory)
    : factory_(std::move(factory)), threads_(size) {
    for (int r = 0; r < size; ++r) ranks_.push_back(std::make_unique<Rank>());
}

Result<std::unique_ptr<TensorParallelRunner>> TensorParallelRunner::create(const ModelWeights& full, int size,
                                                                           RankBackendFactory factory,
                                                                           bool expert_parallel) {
    QS_RETURN_IF_ERROR(shard_config(full.config, size, expert_parallel).status());
    QS_CHECK(factory.make_ops && factory.make_collective);
    std::unique_ptr<TensorParallelRunner> g(new TensorParallelRunner(size, std::move(factory)));
    for (int r = 0; r < size; ++r) {
        QS_ASSIGN_OR_RETURN(g->ranks_[size_t(r)]->shard, shard_weights(full, r, size, expert_parallel));
    }
    std::vector<Status> made(size_t(size), Status::ok());
    g->threads_.run_all([&](int r) { made[size_t(r)] = g->init_rank(r); });
    for (int r = 0; r < size; ++r)
        if (!made[size_t(r)].is_ok())
            return Status(made[size_t(r)].kind(),
                          fmt::format("tensor-parallel rank {}: {}", r, made[size_t(r)].message()));
    g->threads_.run_on(0, [&] {
        g->graph_batch_sizes_ = g->ranks_[0]->ops->graph_batch_sizes();
        g->supports_mrope_ = g->ranks_[0]->ops->supports_mrope();
    });
    return g;
}

Status TensorParallelRunner::init_rank(int r) {
    Rank& k = *ranks_[size_t(r)];
    QS_ASSIGN_OR_RETURN(k.ops, factory_.make_ops(r, k.shard));
    QS_ASSIGN_OR_RETURN(k.comm, factory_.make_collective(r, *k.ops));
    QS_CHECK(k.comm->rank() == r && k.comm->size() == size());
    k.model = std::make_unique<Qwen36Model>(k.shard, *k.ops, k.comm);
    return Status::ok();
}

TensorParallelRunner::~TensorParallelRunner() {
    // Each rank's cache, model and backend go on the thread that made them.
    threads_.run_all([&](int r) { ranks_[size_t(r)].reset(); });
}

void TensorParallelRunner::check_cache(const ModelCache& cache) const {
    QS_CHECK_MSG(&cache == cache_, "TensorParallelRunner: a cache this runner did not make");
}

std::unique_ptr<ModelCache> TensorParallelRunner::make_cache(const CacheGeometry& g) {
    QS_CHECK_MSG(cache_ == nullptr, "TensorParallelRunner: one cache per runner");
    threads_.run_all([&](int r) {
        Rank& k = *ranks_[size_t(r)];
        const ModelConfig& c = k.shard.config;
        const bool with_mtp = g.num_kv_layers > c.num_full_attention_layers();
        // The rank's heads, the same pages and slots.
        CacheGeometry mine =
            CacheGeometry::for_model(c, g.num_blocks, g.block_size, g.num_state_slots, with_mtp, g.kv_dtype);
        mine.state_bf16 = g.state_bf16;
        QS_CHECK(mine.num_kv_layers == g.num_kv_layers && mine.num_gdn_layers == g.num_gdn_layers);
        k.cache = k.ops->make_cache(mine);
    });
    auto cache = std::make_unique<ModelCache>(g, std::make_unique<GroupStorage>(*this));
    cache_ = cache.get();
    return cache;
}

ModelRunner::Output TensorParallelRunner::forward(const ForwardBatch& batch, ModelCache& cache, bool want_hidden,
                                                  Output recycled) {
    check_cache(cache);
    Output out0{};
    threads_.run_all([&](int r) {
        Rank& k = *ranks_[size_t(r)];
        Output& out = r == 0 ? out0 : k.forward_out;
        out = k.model->forward(batch, *k.cache, want_hidden, r == 0 ? std::move(recycled) : std::move(k.forward_out));
        k.forward_hidden = out.device_hidden;
    });
    return out0;
}

ModelRunner::Output TensorParallelRunner::mtp_forward(const ForwardBatch& batch, const float* hidden,
                                                      int64_t num_hidden_rows, const std::vector<int32_t>& hidden_rows,
                                                      ModelCache& cache, bool want_hidden, Output recycled) {
    check_cache(cache);
    // `hidden` is rank 0's, from the last forward or MTP forward: each rank reads its own.
    const Rank& first = *ranks_[0];
    const bool from_forward = hidden == first.forward_hidden;
    QS_CHECK_MSG(from_forward || hidden == first.mtp_hidden,
                 "TensorParallelRunner::mtp_forward: hidden states this runner did not return");
    Output out0{};
    threads_.run_all([&](int r) {
        Rank& k = *ranks_[size_t(r)];
        const float* mine = from_forward ? k.forward_hidden : k.mtp_hidden;
        Output& out = r == 0 ? out0 : k.mtp_out;
        out = k.model->mtp_forward(batch, mine, num_hidden_rows, hidden_rows, *k.cache, want_hidden,
                                   r == 0 ? std::move(recycled) : std::move(k.mtp_out));
        k.mtp_hidden = out.device_hidden;
    });
    return out0;
}

void TensorParallelRunner::commit_deferred_state(const ForwardBatch& commit, const std::vector<int32_t>& deferred_rows,
                                                 ModelCache& cache) {
    check_cache(cache);
    threads_.run_all([&](int r) {
        Rank& k = *ranks_[size_t(r)];
        k.model->commit_deferred_state(commit, deferred_rows, *k.cache);
    });
}

void TensorParallelRunner::reserve_mtp_hidden(int64_t max_rows, int64_t max_mtp_rows) {
    threads_.run_all([&](int r) { ranks_[size_t(r)]->model->reserve_mtp_hidden(max_rows, max_mtp_rows); });
}

void TensorParallelRunner::take_argmax(Output& out) {
    if (!out.argmax_pending) return;
    threads_.run_on(0, [&] { ranks_[0]->model->take_argmax(out); });
}

UploadMemory& TensorParallelRunner::upload_memory() { return ranks_[0]->ops->upload_memory(); }

void TensorParallelRunner::sample(float* logits, int64_t V, const SamplingBatch& batch, ModelCache& cache,
                                  SampleOutput& out) {
    check_cache(cache);
    threads_.run_on(0, [&] {
        Rank& k = *ranks_[0];
        k.ops->sample(logits, V, batch, *k.cache, out);
    });
}

}  // namespace qs

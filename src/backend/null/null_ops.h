// NullOps: a backend that does no arithmetic, so the engine loop (scheduling, cache bookkeeping,
// batch building, sampling, outputs) can be measured at real shapes without a forward. No op
// writes an activation buffer, so every alloc() returns the same zeroed region (grown to the
// largest request, never touched: it costs neither page faults nor memsets per forward); every
// op's output therefore reads as zeros, and the ModelCache needs no storage. copy_to_host still
// writes the n floats the engine reads (logits, hidden states). Used from the engine thread
// (benchmarks, tests).
#pragma once

#include <cstdlib>
#include <memory>
#include <vector>

#include "backend/ops.h"

namespace qs {

class NullOps final : public Ops {
public:
    float* alloc(int64_t n) override;
    void free_all() override { retired_.clear(); }
    void copy_to_host(const float* src, int64_t n, float* dst) override;
    void copy_from_host(const float* src, int64_t n, float* dst) override {}
    float* persistent(int id, int64_t n) override { return alloc(n); }  // never written: zeros
    void copy(const float* src, int64_t n, float* dst) override {}
    bool needs_cache_storage() const override { return false; }
    bool supports_mrope() const override { return true; }  // computes nothing

    void embed(const WeightBuffer& table, const int32_t* ids, int64_t T, float* x) override {}
    void rms_norm_zc(const float* x, const ParamVector& w, int64_t T, int64_t n, double eps, float* y) override {}
    void linear(const float* x, int64_t T, const LinearWeight& w, float* y) override {}
    void linear_leading_rows(const float* x, int64_t T, const LinearWeight& w, int64_t rows, float* y) override {}
    // Every logit is zero: the greedy pick (token 0) for every row.
    void sample(float* logits, int64_t V, const SamplingBatch& batch, ModelCache& cache, SampleOutput& out) override;
    void add(float* x, const float* y, int64_t n) override {}
    void fill_zero(float* x, int64_t n) override {}
    void gather_rows(const float* src, const int32_t* rows, int64_t R, int64_t n, float* out) override {}
    void concat_columns(const float* a, const float* b, int64_t T, int64_t n, float* out) override {}
    void gated_attention(const float* qg, float* k, const float* v, const ParamVector& q_norm,
                         const ParamVector& k_norm, const AttentionDims& d, const ForwardBatch& batch,
                         const int32_t* positions, ModelCache& cache, int64_t kv_layer, float* out) override {}
    void gated_delta_net(const float* qkv, const float* z, const float* b, const float* a, const GdnWeights& w,
                         const GdnDims& d, const ForwardBatch& batch, ModelCache& cache, int64_t gdn_layer,
                         float* out) override {}
    void gdn_commit(const GdnWeights& w, const GdnDims& d, const ForwardBatch& commit,
                    const std::vector<int32_t>& deferred_rows, ModelCache& cache, int64_t gdn_layer) override {}
    void moe(const float* x, int64_t T, const MoeWeights& w, int64_t top_k, bool norm_topk_prob, float* y) override {}

private:
    struct Free {
        void operator()(float* p) const { std::free(p); }
    };
    std::unique_ptr<float, Free> zeros_;  // [capacity_] zeros, shared by every alloc()
    int64_t capacity_ = 0;
    std::vector<std::unique_ptr<float, Free>> retired_;  // outgrown regions, freed at free_all()
};

}  // namespace qs

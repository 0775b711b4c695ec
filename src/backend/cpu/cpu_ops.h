// CpuOps: the CPU backend, the specification every other backend is checked against.
// Plain loops in fp32 with OpenMP across output rows / heads; one file per op family.
// Used from the engine thread only.
#pragma once

#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <vector>

#include "backend/ops.h"

namespace qs {

class CpuOps : public Ops {  // not final: tests subclass it to observe the forwards
public:
    float* alloc(int64_t n) override;
    void free_all() override { buffers_.clear(); }
    size_t mark() override { return buffers_.size(); }
    void release_to(size_t mark) override { buffers_.resize(std::min(mark, buffers_.size())); }
    float* persistent(int id, int64_t n) override;
    bool supports_mrope() const override { return true; }
    void copy(const float* src, int64_t n, float* dst) override { std::copy_n(src, n, dst); }
    void copy_to_host(const float* src, int64_t n, float* dst) override { std::copy_n(src, n, dst); }
    void copy_from_host(const float* src, int64_t n, float* dst) override { std::copy_n(src, n, dst); }

    void embed(const WeightBuffer& table, const int32_t* ids, int64_t T, float* x) override;
    void rms_norm_zc(const float* x, const ParamVector& w, int64_t T, int64_t n, double eps, float* y) override;
    void linear(const float* x, int64_t T, const LinearWeight& w, float* y) override;
    void sample(float* logits, int64_t V, const SamplingBatch& batch, ModelCache& cache, SampleOutput& out) override;
    void add(float* x, const float* y, int64_t n) override;
    void fill_zero(float* x, int64_t n) override;
    void gather_rows(const float* src, const int32_t* rows, int64_t R, int64_t n, float* out) override;
    void concat_columns(const float* a, const float* b, int64_t T, int64_t n, float* out) override;
    void gated_attention(const float* qg, float* k, const float* v, const ParamVector& q_norm,
                         const ParamVector& k_norm, const AttentionDims& d, const ForwardBatch& batch,
                         const int32_t* positions, ModelCache& cache, int64_t kv_layer, float* out) override;
    void gated_delta_net(const float* qkv, const float* z, const float* b, const float* a, const GdnWeights& w,
                         const GdnDims& d, const ForwardBatch& batch, ModelCache& cache, int64_t gdn_layer,
                         float* out) override;
    void gdn_commit(const GdnWeights& w, const GdnDims& d, const ForwardBatch& commit,
                    const std::vector<int32_t>& deferred_rows, ModelCache& cache, int64_t gdn_layer) override;
    void moe(const float* x, int64_t T, const MoeWeights& w, int64_t top_k, bool norm_topk_prob, float* y) override;

private:
    // The inputs of the deferred spans of the last forward, per GDN layer: pre-conv qkv [rows, C],
    // b and a [rows, Nv], and where each deferred span (by its first row) starts among them.
    struct GdnStash {
        std::vector<float> qkv, b, a;
        std::map<int32_t, int64_t> first_row;
    };
    std::map<int64_t, GdnStash> gdn_stash_;
    std::vector<std::unique_ptr<float[]>> buffers_;
    std::map<int, std::vector<float>> persistent_;
};

namespace cpu {
// Work (multiply-adds) below which a loop runs on one thread: a fork/join costs tens of
// microseconds, and much more when another process holds the other cores.
constexpr int64_t kParallelWork = int64_t(1) << 22;
// Building blocks shared by the op files (and by tests as references).
float dot(const float* a, const float* b, int64_t n);
// y [T, out] = x [T, in] · Wᵀ, parallel over output rows.
void linear(const float* x, int64_t T, const LinearWeight& w, float* y);
// In place zero-centred RMSNorm of one vector of n values.
void rms_norm_zc_row(float* x, const float* w, int64_t n, double eps);
// The sampler's specification (backend/sampling.h) over host logits [rows, V] and token pages
// [num_blocks, block_size] (null when no row has penalties).
void sample_rows(float* logits, int64_t V, const SamplingBatch& b, const int32_t* token_pages, int64_t block_size,
                 SampleOutput& out);
inline float silu(float x) { return x / (1.0f + std::exp(-x)); }
inline float sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }
inline float softplus(float x) { return x > 20.0f ? x : std::log1p(std::exp(x)); }
// Rounds a K/V value as the cache's storage dtype would.
float round_for_kv(float x, KvCacheDtype t);

// The vision tower's reference forward (cpu_vision.cpp; Ops::vision_tower's default): host
// memory in and out, any thread.
void vision_tower(const VisionWeights& w, const float* patches, const std::vector<VisionGrid>& grids, float* out,
                  float* blocks_out);
// Per patch row of one image (merge-block order): the 4 bilinear taps (align_corners) into the
// pos_side² position table, index [rows][4] and weight [rows][4], taps in the order (row 0 col 0,
// row 0 col 1, row 1 col 0, row 1 col 1).
void vision_position_taps(const VisionGrid& g, int merge, int side, int32_t* index, float* weight);
// Per patch row of one image: cos and sin [rows][head_dim / 2] of the axial rotary (dims
// [0, head_dim/4) by the patch row, [head_dim/4, head_dim/2) by the column).
void vision_rotary_tables(const VisionGrid& g, int merge, int head_dim, double theta, float* cos_out, float* sin_out);
float gelu_tanh(float x);  // the tower's block MLP activation (gelu_pytorch_tanh)
float gelu_erf(float x);   // the merger's (exact GELU)
}  // namespace cpu

}  // namespace qs

// Ops: the operations the model's forward is written against, at fused-layer granularity.
// backend/cpu implements them as the specification (plain loops, fp32 math); backend/cuda
// mirrors them file for file. Activations are [num_tokens, width] row-major buffers in the
// backend's memory; the model never dereferences them. Shapes are noted next to each argument.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <optional>
#include <vector>

#include "backend/forward_batch.h"
#include "backend/layer_weights.h"
#include "backend/linear_weight.h"
#include "backend/model_cache.h"
#include "backend/sampling.h"
#include "backend/vision_weights.h"
#include "backend/weight_set.h"

namespace qs {

// Dimensions of one gated full-attention layer.
struct AttentionDims {
    int64_t num_heads;     // query heads
    int64_t num_kv_heads;
    int64_t head_dim;
    int64_t rotary_dim;    // first rotary_dim dims of each head are rotated (NeoX half split)
    double rope_theta;
    double eps;            // q/k norm epsilon
    // M-RoPE frequency split (transformers' interleaved layout): frequency i uses the h stream
    // when i % 3 == 1 and i < 3 * mrope_section[1], the w stream when i % 3 == 2 and
    // i < 3 * mrope_section[2], else the t stream. Only read for batches with has_mrope().
    std::array<int64_t, 3> mrope_section{11, 11, 10};
};

// Dimensions of one Gated DeltaNet layer.
struct GdnDims {
    int64_t num_key_heads, num_value_heads, key_head_dim, value_head_dim, conv_kernel;
    double eps;  // gated-norm epsilon
    int64_t key_dim() const { return num_key_heads * key_head_dim; }
    int64_t value_dim() const { return num_value_heads * value_head_dim; }
    int64_t conv_dim() const { return 2 * key_dim() + value_dim(); }
};

// What lets a forward's layers replay as a captured CUDA graph (Ops::begin_forward). A batch
// qualifies when its sequences are laid out on a fixed stride q (span i starts at row i·q) of at
// most 4 rows, each span q rows long — or, with short_spans, a GDN commit over the deferred
// (verify) forward just before it: any subset of its spans, in order, each shortened to rows
// 1..a (1 <= a < q) of the verify span, at the verify span's rows (row i·q + 1 for verify span
// i); the other rows are unused.
struct Replay {
    ModelCache* cache = nullptr;  // the cache the layers use; null: not replayable
    uint64_t variant = 0;         // tells apart different work over the same batch shape
    bool short_spans = false;
    const char* phase = "forward";  // a string literal naming the work (a backend's profiling only)
};

// One projection of a shared input in Ops::linears: y [T, w.out] = x · Wᵀ.
struct LinearOut {
    const LinearWeight& w;
    float* y;
};

// A device backend's memory: its activation arena (the most bytes a forward held at once so
// far, and what the arena holds from the device) and the device's free and total bytes.
struct DeviceMemoryUse {
    size_t arena_high_water = 0;
    size_t arena_reserved = 0;
    size_t free_bytes = 0;
    size_t total_bytes = 0;
};

class Ops {
public:
    virtual ~Ops() = default;

    // Allocates an activation buffer of n floats in the backend's memory (CPU: zeroed; CUDA:
    // contents undefined — every op writes all of its output).
    virtual float* alloc(int64_t n) = 0;
    virtual void free_all() = 0;  // releases every buffer from alloc()
    // Stack discipline inside a forward: release_to(mark()) frees every buffer allocated after
    // the mark (a layer's temporaries), so memory stays one layer deep, not forty.
    virtual size_t mark() { return 0; }
    virtual void release_to(size_t mark) {}
    // A buffer of n floats in the backend's memory that free_all does not release: one per id,
    // kept (and grown, losing its contents) across forwards. For results that outlive their
    // forward (the final hidden states the MTP head reads after a rollback forward ran).
    virtual float* persistent(int id, int64_t n) = 0;
    // Copies n floats between two backend buffers.
    virtual void copy(const float* src, int64_t n, float* dst) = 0;
    // Copies n floats from a backend buffer to host memory.
    virtual void copy_to_host(const float* src, int64_t n, float* dst) = 0;
    // Copies n floats from host memory into a backend buffer.
    virtual void copy_from_host(const float* src, int64_t n, float* dst) = 0;
    // Whether the ModelCache must hold K/V and state storage for this backend (false for NullOps,
    // which only runs the engine's bookkeeping).
    virtual bool needs_cache_storage() const { return true; }
    // Whether gated_attention rotates by 3-D M-RoPE positions (ForwardBatch::has_mrope: images
    // and the text after them). The engine refuses image requests on a backend without it.
    virtual bool supports_mrope() const { return false; }
    // Creates the per-sequence cache (KV pages, GDN state slots) in the backend's memory.
    virtual std::unique_ptr<ModelCache> make_cache(const CacheGeometry& g) {
        return std::make_unique<ModelCache>(g, needs_cache_storage());
    }
    // Moves the weights into the backend's memory before the first forward (CUDA: uploads each
    // view and files the copy at the view's WeightHandle, which the set wrote: the ops then read
    // it from the view they are handed). The weights the set points to must outlive the backend
    // and keep their addresses. The CPU backend reads the host views and needs nothing here.
    virtual void prepare_weights(const WeightSet& w) {}
    // A device backend's memory as it stands (the GPU cache budget is sized from it:
    // make_backend.h, gpu_cache_budget_mb); nullopt for host backends.
    virtual std::optional<DeviceMemoryUse> device_memory() { return std::nullopt; }
    // Called once at the start of every forward with the batch the following ops will see
    // (CUDA: uploads token ids, positions and block tables once instead of per op). Returns the
    // number of rows the forward's ops run over: batch.num_tokens(), or more when the forward is
    // replayable (`replay.cache` non-null: run_layers follows) and the backend pads the batch to
    // the size of a captured CUDA graph (the extra rows are dummy sequences after the real rows;
    // their results are to be ignored).
    virtual int64_t begin_forward(const ForwardBatch& batch, const int32_t* positions, const Replay& replay = {}) {
        return batch.num_tokens();
    }
    // Runs `layers` — the part of a forward that only enqueues work on the backend (no copies to
    // or from the host) and whose work depends only on the padded batch shape and the Replay's
    // variant — and returns its result buffer. CUDA: after a replayable begin_forward, the first
    // call for a batch shape captures the work into a CUDA graph and later calls replay it
    // without running `layers`.
    virtual float* run_layers(const std::function<float*()>& layers) { return layers(); }
    // The batch sizes (sequences, one row each; or 1 + k rows each for MTP verify steps) whose
    // steps replay captured graphs, ascending; empty where the backend has none. A batch of n
    // sequences is padded to the smallest size >= n. And the graphs captured so far (tests, logs).
    virtual std::vector<int64_t> graph_batch_sizes() const { return {}; }
    virtual int64_t graph_captures() const { return 0; }
    // x[0..n) = 0.
    virtual void fill_zero(float* x, int64_t n) = 0;
    // Waits until queued work is done (CUDA: stream synchronize); for timing.
    virtual void synchronize() {}

    // x[t] = table[ids[t]]. table [vocab, hidden]; x [T, hidden].
    virtual void embed(const WeightBuffer& table, const int32_t* ids, int64_t T, float* x) = 0;
    // Zero-centred RMSNorm: y = x * rsqrt(mean(x²) + eps) * (1 + w). x, y [T, n]; w [n].
    virtual void rms_norm_zc(const float* x, const ParamVector& w, int64_t T, int64_t n, double eps, float* y) = 0;
    // y = x · Wᵀ for selected rows: x [T, in], y [T, out].
    virtual void linear(const float* x, int64_t T, const LinearWeight& w, float* y) = 0;
    // y = x · W[0, rows)ᵀ, y [T, rows]: only the first `rows` output features of w (MTP drafts over
    // a draft vocabulary read those rows of lm_head alone). w must be leading_rows_supported.
    // Default: linear over the leading_rows view.
    virtual void linear_leading_rows(const float* x, int64_t T, const LinearWeight& w, int64_t rows, float* y);
    // Several linears of one input x [T, in] (every w.in equal): each out.y is bitwise what
    // linear(x, T, out.w, out.y) writes; a backend may share work on x between them (CUDA: its
    // quantisation or bf16 rounding). The outputs must not overlap x. Default: linear per output.
    virtual void linears(const float* x, int64_t T, std::initializer_list<LinearOut> outs);
    // out[r] = index of the largest of x[r, 0..n) (the first one on ties), for x [R, n] in the
    // backend's memory; out is a host array. Greedy batches take tokens without copying logits.
    virtual void argmax_rows(const float* x, int64_t R, int64_t n, int32_t* out);
    // argmax_rows in two halves: start enqueues it (x may be released right after: later work is
    // ordered after it), wait returns its R ids into `out` (host) once they are there. One
    // argmax in flight at a time (a start waits for the previous one's result to be taken or
    // dropped). Default: start runs argmax_rows, wait copies.
    virtual void argmax_rows_start(const float* x, int64_t R, int64_t n);
    virtual void argmax_rows_wait(int32_t* out);
    // Draws one token per SampleRow from logits [rows, V] in the backend's memory, by the
    // contract in backend/sampling.h (the adjustments change the logits rows in place); reads the
    // penalties' history from the cache's token pages. Fills `out` (host memory) for every row.
    virtual void sample(float* logits, int64_t V, const SamplingBatch& batch, ModelCache& cache,
                        SampleOutput& out) = 0;
    // Host memory for a SamplingBatch's bitmask (upload_memory.h): page-locked where sample()
    // copies it to a device, so the copy can run beside the forward. Lives as long as the process.
    virtual UploadMemory& upload_memory() { return heap_upload_memory(); }
    // Writes the batch's token ids into the cache's token pages at their positions (the history
    // the sampler reads). Target forwards only: an MTP forward's rows hold the next tokens.
    virtual void store_token_ids(const ForwardBatch& batch, const int32_t* positions, ModelCache& cache);
    // x += y, n elements.
    virtual void add(float* x, const float* y, int64_t n) = 0;
    // x += y, then out = rms_norm_zc(x) (x, y, out [T, n]; out may equal x, which then holds only
    // the normalised rows): the residual add and the next norm, which backends may do in one pass.
    virtual void add_rms_norm_zc(float* x, const float* y, const ParamVector& w, int64_t T, int64_t n, double eps,
                                 float* out) {
        add(x, y, T * n);
        rms_norm_zc(x, w, T, n, eps, out);
    }
    // x += y1 (when not null), x += y2, then out = rms_norm_zc(x): the post-attention norm, which
    // also takes the previous layer's MoE output when the layer's input norm left it out of x
    // (rms_norm_linears). Bitwise add_rms_norm_zc after add. Default: those two.
    virtual void add2_rms_norm_zc(float* x, const float* y1, const float* y2, const ParamVector& w, int64_t T,
                                  int64_t n, double eps, float* out) {
        if (y1 != nullptr) add(x, y1, T * n);
        add_rms_norm_zc(x, y2, w, T, n, eps, out);
    }
    // h = rms_norm_zc(x + pending) (pending may be null: rms_norm_zc(x)), x not written, then
    // linears(h, T, outs): a layer's input norm and the projections that read it, which a backend
    // may run as one launch (CUDA: CudaOptions::fused_input_norm). h [T, n] must not overlap x,
    // pending or an output. Each output and h are bitwise what the default gives. Default: the norm
    // into h, then linears.
    virtual void rms_norm_linears(const float* x, const float* pending, const ParamVector& w, int64_t T, int64_t n,
                                  double eps, float* h, std::initializer_list<LinearOut> outs);
    // y [T, W.out] = a · Wᵀ, then add2_rms_norm_zc(x, pending, y, norm_w, T, W.out, eps, h): the
    // o_proj / GDN out_proj and the post-attention norm after it, which a backend may run as one
    // launch (CUDA: CudaOptions::fused_output_norm). x, h, y and a must not overlap. Every result is
    // bitwise what the default gives. Default: linear, then add2_rms_norm_zc.
    virtual void linear_add2_rms_norm_zc(const float* a, int64_t T, const LinearWeight& W, float* y, float* x,
                                         const float* pending, const ParamVector& norm_w, double eps, float* h) {
        linear(a, T, W, y);
        add2_rms_norm_zc(x, pending, y, norm_w, T, W.out_features, eps, h);
    }
    // out [R, n] = src[rows[r]] for src [*, n]; rows is a host array.
    virtual void gather_rows(const float* src, const int32_t* rows, int64_t R, int64_t n, float* out) = 0;
    // out [T, 2n] = [a | b] row by row, for a, b [T, n].
    virtual void concat_columns(const float* a, const float* b, int64_t T, int64_t n, float* out) = 0;

    // Gated full attention core: from the projections qg [T, heads, 2*head_dim] (query | gate per
    // head), k, v [T, kv_heads, head_dim]: q/k norm, partial RoPE, store k/v into the paged cache
    // at each row's position, causal attention over the cache, and o = attn ⊙ sigmoid(gate).
    // out [T, heads * head_dim].
    virtual void gated_attention(const float* qg, float* k, const float* v, const ParamVector& q_norm,
                                 const ParamVector& k_norm, const AttentionDims& d,
                                 const ForwardBatch& batch, const int32_t* positions, ModelCache& cache,
                                 int64_t kv_layer, float* out) = 0;

    // Gated DeltaNet core: causal conv1d + SiLU over qkv [T, conv_dim] using and updating the
    // slot's conv window; L2-normalised q/k, beta = sigmoid(b), g = -exp(A_log)·softplus(a + dt_bias);
    // the delta-rule recurrence on the slot's state; gated RMSNorm with z. b, a [T, value_heads];
    // z [T, value_dim]; out [T, value_dim]. A deferred span (SeqSpan::defer_state) leaves its slot
    // after its first row and, with a spare_slot, writes the state after its last row there.
    virtual void gated_delta_net(const float* qkv, const float* z, const float* b, const float* a,
                                 const GdnWeights& w, const GdnDims& d, const ForwardBatch& batch,
                                 ModelCache& cache, int64_t gdn_layer, float* out) = 0;

    // Commits deferred GDN spans (SeqSpan::defer_state) of the last forward that ran this layer.
    // That forward already wrote the state and conv window after each deferred span's first row
    // (always kept: it is the sequence's last token) into the slot; span i of `commit` (set up by
    // begin_forward) runs its num_tokens rows — rows 1..num_tokens of the deferred span that
    // began at row deferred_rows[i] of that forward, the accepted drafts — from the stashed
    // inputs through the conv window and the recurrence into its slot, so that the slot ends as
    // an ordinary forward over rows 0..num_tokens would have left it. A sequence that accepted no
    // draft needs no commit span. The layer's outputs are not produced.
    virtual void gdn_commit(const GdnWeights& w, const GdnDims& d, const ForwardBatch& commit,
                            const std::vector<int32_t>& deferred_rows, ModelCache& cache, int64_t gdn_layer) = 0;

    // The vision tower (spec §1.3) over images' patch rows: patches [rows][patch_dim] in host
    // memory (images in order, each grids[i].rows() rows in merge-block order) → out
    // [rows / merge²][out_hidden] in host memory, one embedding per merged token; blocks_out, when
    // non-null, gets the last block's output [rows][hidden] (tests). Called from the thread that
    // submits a request, concurrently with the engine thread's forwards: an implementation must
    // not touch the forward's buffers or stream. Default: the host reference (cpu::vision_tower).
    virtual void vision_tower(const VisionWeights& w, const float* patches, const std::vector<VisionGrid>& grids,
                              float* out, float* blocks_out = nullptr);
    // Takes the device memory the tower needs for images of up to `max_rows` patch rows (its
    // weights and the activation arena of such a forward: backend/vision_memory.h) now, before a
    // GPU's cache is sized from what is left (model/model_backend.h). Returns the bytes it holds.
    // Default (host backends): nothing to take, 0.
    virtual size_t reserve_vision_tower(const VisionWeights& w, int64_t max_rows) { return 0; }

    // Sparse MoE with shared expert: router softmax (fp32), top-k, renormalise, SiLU-gated experts,
    // shared expert × sigmoid(shared_expert_gate). x, y [T, hidden].
    virtual void moe(const float* x, int64_t T, const MoeWeights& w, int64_t top_k, bool norm_topk_prob,
                     float* y) = 0;

private:
    std::vector<int32_t> started_argmax_;  // the default argmax_rows_start's result
};

}  // namespace qs

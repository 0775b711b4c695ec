// Qwen36Model: the Qwen3.6-35B-A3B text forward (spec §2) and its MTP draft block (spec §3),
// written once against backend Ops. It holds no per-sequence state: the caches live in a
// ModelCache indexed through the ForwardBatch. Used from the engine thread.
#pragma once

#include <vector>

#include "backend/collective.h"
#include "backend/ops.h"
#include "model/weights.h"

namespace qs {

class Qwen36Model {
public:
    // With `tp` (a tensor-parallel group's Collective), `weights` is this rank's shard
    // (model/tensor_parallel.h) and every rank of the group must run the same calls in step:
    // the blocks' outputs are all-reduced and the logits all-gathered, so each rank's Output
    // is the whole model's.
    Qwen36Model(const ModelWeights& weights, Ops& ops, Collective* tp = nullptr);

    struct Output {
        std::vector<float> logits;  // [batch.logits_rows.size(), vocab_size]
        // If asked: forward(): the final-normed hidden of every row [num_tokens, hidden] (the
        // MTP input); mtp_forward(): the MTP output after mtp.norm at the logits rows
        // [batch.logits_rows.size(), hidden] (the next draft step's input). In the backend's
        // memory, valid until the next forward (resp. mtp_forward) that asks for hidden states;
        // copied to `hidden` (host) too when the logits come back to the host.
        const float* device_hidden;
        int64_t num_hidden_rows;
        std::vector<float> hidden;
        std::vector<int32_t> argmax;  // [batch.logits_rows.size()] when batch.argmax_only
        // batch.argmax_deferred: argmax is filled by take_argmax (true until then).
        bool argmax_pending;
        // [batch.logits_rows.size(), vocab_size] in the backend's memory when
        // batch.logits_on_device; valid until the next forward or mtp_forward.
        float* device_logits;  // (no initializer: Output{} is a default argument of this class)
    };

    // One forward over the batch: writes K/V and GDN state for every row, returns logits for
    // batch.logits_rows (and the final hidden states of all rows if want_hidden). `recycled` is a
    // previous Output whose buffers are reused (a loop passes its last one back to avoid
    // allocating and faulting in [rows, vocab] floats every step).
    Output forward(const ForwardBatch& batch, ModelCache& cache, bool want_hidden = false, Output recycled = {});

    // One MTP draft step per row: row r has token x_{p+1} (batch.token_ids[r]) at position p
    // (the position of the hidden state), and the target's final-normed hidden h_p, which is
    // hidden[hidden_rows[r]] (hidden [*, hidden_size] on the host; hidden_rows empty: hidden[r],
    // with hidden holding exactly num_tokens rows). The rows are picked on the backend, so the
    // caller passes forward()'s hidden as it is. Writes the MTP layer's K/V at position p.
    // Returns draft logits for batch.logits_rows and (if want_hidden) the MTP output after
    // mtp.norm at those rows.
    Output mtp_forward(const ForwardBatch& batch, const std::vector<float>& hidden,
                       const std::vector<int32_t>& hidden_rows, ModelCache& cache, bool want_hidden = false,
                       Output recycled = {});
    // The same with hidden [num_hidden_rows, hidden_size] in the backend's memory (an Output's
    // device_hidden): nothing crosses to the host.
    Output mtp_forward(const ForwardBatch& batch, const float* hidden, int64_t num_hidden_rows,
                       const std::vector<int32_t>& hidden_rows, ModelCache& cache, bool want_hidden = false,
                       Output recycled = {});

    // After a forward with deferred spans (SeqSpan::defer_state, MTP verification), which
    // already wrote each span's first row into its GDN slot: runs rows 1..commit.seqs[i].num_tokens
    // (the accepted drafts) of the deferred span that began at row deferred_rows[i] into span
    // i's GDN slot, in every GDN layer (Ops::gdn_commit). Sequences that accepted no draft are
    // left out (an empty commit runs nothing). K/V need nothing: rejected positions are
    // overwritten later.
    void commit_deferred_state(const ForwardBatch& commit, const std::vector<int32_t>& deferred_rows, ModelCache& cache);

    // Sizes the hidden states kept for the MTP head for forwards of up to max_rows rows and MTP
    // forwards of up to max_mtp_rows logits rows, now: their addresses are what captured MTP
    // graphs read (Replay::variant), so they must not move when a larger batch comes later.
    void reserve_mtp_hidden(int64_t max_rows, int64_t max_mtp_rows);

    // Fills out.argmax of the last forward or mtp_forward that ran with batch.argmax_deferred
    // (waits for it); nothing when out.argmax_pending is false.
    void take_argmax(Output& out);

    const ModelConfig& config() const { return w_.config; }
    const ModelWeights& weights() const { return w_; }
    Ops& ops() { return ops_; }
    // Index of the MTP layer among the cache's KV layers.
    int64_t mtp_kv_layer() const { return config().num_full_attention_layers(); }

private:
    // Runs decoder layer `l` on the residual stream x [T, hidden] (T ≥ batch rows when the backend
    // pads). The previous layer's MoE output `pending` [T, hidden] (nullptr for the first layer)
    // is added into x by this layer's first norm, and this layer's MoE output goes to `moe_out`
    // [T, hidden] un-added, for the next layer's first norm or the final norm: each residual add
    // rides on the norm after it (Ops::add_rms_norm_zc). pending may equal moe_out.
    // The mixer's output projection (o_proj / GDN out_proj) into out, then the post-attention norm:
    // x += pending, x += out, h = rms_norm_zc(x) (Ops::linear_add2_rms_norm_zc; with tensor parallel,
    // out is all-reduced between the two).
    void mixer_out_norm(const float* a, int64_t T, const LinearWeight& w, float* out, float* x, const float* pending,
                        const ParamVector& norm_w, float* h);
    void decoder_layer(const DecoderLayerWeights& l, float* x, const float* pending, float* moe_out, int64_t T,
                       const ForwardBatch& batch, const int32_t* positions, ModelCache& cache, int64_t kv_layer,
                       int64_t gdn_layer);
    enum class HiddenOut : uint8_t { kNone, kAllRows, kLogitsRows };
    // Ops::persistent ids of the hidden states that outlive their forward.
    // The logits too: their size swings with the batch (up to max_num_seqs × (1 + k) rows × vocab
    // in a verify step), which in the stack-ordered arena leaves large chunks stranded.
    enum PersistentId : int { kForwardHidden = 1, kMtpHidden = 2, kUploadedHidden = 3, kLogits = 4 };
    // Replay::variant of the forward's layers and of the GDN commit (an MTP forward's variant is
    // the address of the hidden states it reads).
    static constexpr uint64_t kLayersVariant = 0, kCommitVariant = 1;
    Output finish(const float* x_final, const ForwardBatch& batch, HiddenOut hidden_out, Output recycled);
    // QS_CHECKs the batch's shape: rows in range, block tables covering every row's position.
    void check_batch(const ForwardBatch& batch, const ModelCache& cache) const;

    // The batch's image embeddings (ForwardBatch::embed_rows) copied to the backend before the
    // layers run (null when none), and placed over the embedded rows of x [T, H].
    const float* upload_embeds(const ForwardBatch& batch);
    void place_embeds(const ForwardBatch& batch, const float* rows, float* x);

    // x[0..n) summed over the tensor-parallel ranks (nothing without a group).
    void reduce(float* x, int64_t n);

    const ModelWeights& w_;
    Ops& ops_;
    Collective* tp_;
    AttentionDims attn_dims_;
    GdnDims gdn_dims_;
};

}  // namespace qs

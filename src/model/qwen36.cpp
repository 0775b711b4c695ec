// The Qwen3.6 text forward and MTP step against backend Ops (see qwen36.h, spec §2.2 and §3.2).
#include "model/qwen36.h"

#include "core/check.h"

namespace qs {

Qwen36Model::Qwen36Model(const ModelWeights& weights, Ops& ops, Collective* tp) : w_(weights), ops_(ops), tp_(tp) {
    const ModelConfig& c = w_.config;
    QS_CHECK_MSG(c.attn_output_gate, "only gated attention (attn_output_gate: true) is implemented");
    attn_dims_ = {c.num_attention_heads, c.num_key_value_heads, c.head_dim, c.rotary_dim(), c.rope_theta, c.rms_norm_eps};
    // transformers' default split when the config has none (Qwen3_5MoeTextRotaryEmbedding).
    if (c.mrope_section.size() == 3)
        attn_dims_.mrope_section = {c.mrope_section[0], c.mrope_section[1], c.mrope_section[2]};
    gdn_dims_ = {c.linear_num_key_heads, c.linear_num_value_heads, c.linear_key_head_dim, c.linear_value_head_dim,
                 c.linear_conv_kernel_dim, c.rms_norm_eps};
}

void Qwen36Model::decoder_layer(const DecoderLayerWeights& l, float* x, const float* pending, float* moe_out,
                                int64_t T, const ForwardBatch& batch, const int32_t* positions, ModelCache& cache,
                                int64_t kv_layer, int64_t gdn_layer) {
    const ModelConfig& c = w_.config;
    const int64_t H = c.hidden_size;
    const size_t layer_mark = ops_.mark();  // everything below is this layer's temporaries
    float* h = ops_.alloc(T * H);    // [T, H]
    float* out = ops_.alloc(T * H);  // [T, H]
    // The input norm reads x + pending without writing x (Ops::rms_norm_linears: a backend may
    // compute it inside the projections' launch); the post-attention norm adds both to x.
    if (l.type == LayerType::kFullAttention) {
        const AttentionDims& d = attn_dims_;
        float* qg = ops_.alloc(T * c.q_proj_out());                // [T, heads, 2*head_dim]
        float* k = ops_.alloc(T * d.num_kv_heads * d.head_dim);    // [T, kv_heads, head_dim]
        float* v = ops_.alloc(T * d.num_kv_heads * d.head_dim);    // [T, kv_heads, head_dim]
        float* attn = ops_.alloc(T * d.num_heads * d.head_dim);    // [T, heads * head_dim]
        ops_.rms_norm_linears(x, pending, l.input_layernorm, T, H, c.rms_norm_eps, h,
                              {{l.attn.q_proj, qg}, {l.attn.k_proj, k}, {l.attn.v_proj, v}});
        ops_.gated_attention(qg, k, v, l.attn.q_norm, l.attn.k_norm, d, batch, positions, cache, kv_layer, attn);
        mixer_out_norm(attn, T, l.attn.o_proj, out, x, pending, l.post_attention_layernorm, h);
    } else {
        const GdnDims& d = gdn_dims_;
        float* qkv = ops_.alloc(T * d.conv_dim());         // [T, conv_dim]
        float* z = ops_.alloc(T * d.value_dim());          // [T, value_dim]
        float* b = ops_.alloc(T * d.num_value_heads);      // [T, value_heads]
        float* a = ops_.alloc(T * d.num_value_heads);      // [T, value_heads]
        float* o = ops_.alloc(T * d.value_dim());          // [T, value_dim]
        ops_.rms_norm_linears(
            x, pending, l.input_layernorm, T, H, c.rms_norm_eps, h,
            {{l.gdn.in_proj_qkv, qkv}, {l.gdn.in_proj_z, z}, {l.gdn.in_proj_b, b}, {l.gdn.in_proj_a, a}});
        ops_.gated_delta_net(qkv, z, b, a, l.gdn, d, batch, cache, gdn_layer, o);
        mixer_out_norm(o, T, l.gdn.out_proj, out, x, pending, l.post_attention_layernorm, h);
    }
    ops_.moe(h, T, l.moe, c.num_experts_per_tok, c.norm_topk_prob, moe_out);
    reduce(moe_out, T * H);  // tensor parallel: each rank's slice of every expert's intermediate
    ops_.release_to(layer_mark);
}

void Qwen36Model::mixer_out_norm(const float* a, int64_t T, const LinearWeight& w, float* out, float* x,
                                 const float* pending, const ParamVector& norm_w, float* h) {
    const double eps = w_.config.rms_norm_eps;
    if (tp_ == nullptr || tp_->size() == 1) return ops_.linear_add2_rms_norm_zc(a, T, w, out, x, pending, norm_w, eps, h);
    // Tensor parallel: each rank's heads give a partial projection, summed before the residual add.
    ops_.linear(a, T, w, out);
    reduce(out, T * w.out_features);
    ops_.add2_rms_norm_zc(x, pending, out, norm_w, T, w.out_features, eps, h);
}

const float* Qwen36Model::upload_embeds(const ForwardBatch& batch) {
    const int64_t H = w_.config.hidden_size, n = int64_t(batch.embed_rows.size());
    if (n == 0) return nullptr;
    QS_CHECK(int64_t(batch.embeds.size()) == n * H);
    float* d = ops_.alloc(n * H);  // [n, H]
    ops_.copy_from_host(batch.embeds.data(), n * H, d);
    return d;
}

void Qwen36Model::place_embeds(const ForwardBatch& batch, const float* rows, float* x) {
    const int64_t H = w_.config.hidden_size;
    for (size_t i = 0; i < batch.embed_rows.size(); ++i) {
        const int32_t row = batch.embed_rows[i];
        QS_CHECK(row >= 0 && row < batch.num_tokens());
        ops_.copy(rows + int64_t(i) * H, H, x + int64_t(row) * H);
    }
}

void Qwen36Model::reduce(float* x, int64_t n) {
    if (tp_ != nullptr && tp_->size() > 1) tp_->all_reduce_sum(x, n);
}

void Qwen36Model::check_batch(const ForwardBatch& batch, const ModelCache& cache) const {
    const int64_t T = batch.num_tokens(), bs = cache.geometry().block_size;
    for (const SeqSpan& s : batch.seqs) {
        QS_CHECK(s.row_begin >= 0 && s.num_tokens >= 0 && int64_t(s.row_begin) + s.num_tokens <= T);
        QS_CHECK_MSG(int64_t(s.block_table.size()) * bs >= int64_t(s.start_pos) + s.num_tokens,
                     "ForwardBatch: a block table does not cover its rows");
        QS_CHECK_MSG(s.spare_slot < 0 || (s.defer_state && s.spare_slot != s.state_slot &&
                                          s.spare_slot < cache.geometry().num_state_slots),
                     "ForwardBatch: a spare slot needs a deferred span and a valid slot other than its own");
    }
    for (int32_t row : batch.logits_rows) QS_CHECK(row >= 0 && row < T);
}

Qwen36Model::Output Qwen36Model::finish(const float* x_final, const ForwardBatch& batch, HiddenOut hidden_out,
                                        Output recycled) {
    const ModelConfig& c = w_.config;
    const int64_t T = batch.num_tokens(), H = c.hidden_size, V = c.vocab_size;
    const int64_t R = int64_t(batch.logits_rows.size());
    // Resized without clearing first: copy_to_host overwrites every element, so zeroing the
    // recycled buffers ([rows, vocab] floats) would only double the memory traffic.
    Output result = std::move(recycled);
    const int64_t hidden_rows = hidden_out == HiddenOut::kAllRows ? T : hidden_out == HiddenOut::kLogitsRows ? R : 0;
    const bool host_logits = !batch.argmax_only && !batch.logits_on_device;
    result.hidden.resize(host_logits ? size_t(hidden_rows * H) : 0);
    result.num_hidden_rows = hidden_rows;
    result.device_hidden = nullptr;
    if (hidden_out == HiddenOut::kAllRows) {
        float* kept = ops_.persistent(kForwardHidden, T * H);
        ops_.copy(x_final, T * H, kept);
        result.device_hidden = kept;
        if (host_logits) ops_.copy_to_host(x_final, T * H, result.hidden.data());
    }
    result.logits.resize(host_logits ? size_t(R * V) : 0);
    result.argmax.clear();
    result.argmax_pending = false;
    result.device_logits = nullptr;
    if (R > 0) {
        float* logits = ops_.persistent(kLogits, R * V);  // [R, V]
        // Decode batches ask for rows 0..R-1 in order: those are x_final's first R rows already.
        bool leading_rows = true;
        for (int64_t r = 0; r < R && leading_rows; ++r) leading_rows = batch.logits_rows[size_t(r)] == r;
        const float* rows = x_final;  // [R, H]
        if (!leading_rows) {
            float* gathered = ops_.alloc(R * H);
            ops_.gather_rows(x_final, batch.logits_rows.data(), R, H, gathered);
            rows = gathered;
        }
        if (hidden_out == HiddenOut::kLogitsRows) {
            float* kept = ops_.persistent(kMtpHidden, R * H);
            ops_.copy(rows, R * H, kept);
            result.device_hidden = kept;
            if (host_logits) ops_.copy_to_host(rows, R * H, result.hidden.data());
        }
        // An argmax over a draft vocabulary (ForwardBatch::argmax_vocab) computes only its logits:
        // lm_head's first Va rows, the logits [R, Va].
        const bool draft_vocab = batch.argmax_only && !batch.logits_on_device && batch.argmax_vocab > 0 &&
                                 batch.argmax_vocab < V;
        const int64_t Va = draft_vocab ? batch.argmax_vocab : V;
        if (draft_vocab) {
            QS_CHECK_MSG(tp_ == nullptr || tp_->size() == 1,
                         "an argmax over a draft vocabulary with tensor parallel (Engine::create refuses it)");
            ops_.linear_leading_rows(rows, R, w_.lm_head, Va, logits);
        } else if (tp_ != nullptr && tp_->size() > 1) {
            // This rank's vocabulary rows of lm_head, then every rank's columns side by side.
            const int64_t local_vocab = w_.lm_head.out_features;
            QS_CHECK(local_vocab * tp_->size() == V);
            float* local = ops_.alloc(R * local_vocab);  // [R, V / ranks]
            ops_.linear(rows, R, w_.lm_head, local);
            tp_->all_gather_columns(local, R, local_vocab, logits);
        } else {
            ops_.linear(rows, R, w_.lm_head, logits);
        }
        if (batch.logits_on_device) {
            result.device_logits = logits;
        } else if (batch.argmax_only && batch.argmax_deferred) {
            result.logits.clear();
            result.argmax.resize(size_t(R));
            result.argmax_pending = true;
            ops_.argmax_rows_start(logits, R, Va);
        } else if (batch.argmax_only) {
            result.logits.clear();
            result.argmax.resize(size_t(R));
            ops_.argmax_rows(logits, R, Va, result.argmax.data());
        } else {
            ops_.copy_to_host(logits, R * V, result.logits.data());
        }
    }
    // The backend's buffers (the device logits among them) live until the next forward's free_all.
    return result;
}

Qwen36Model::Output Qwen36Model::forward(const ForwardBatch& batch, ModelCache& cache, bool want_hidden,
                                         Output recycled) {
    const ModelConfig& c = w_.config;
    const int64_t H = c.hidden_size;
    check_batch(batch, cache);
    ops_.free_all();  // the previous forward's buffers (its logits were read by now)
    const std::vector<int32_t> positions = batch.positions();
    // T ≥ the batch's rows: a backend may pad the batch to replay a captured graph. Batches with
    // image embeddings are not replayed (the rows they replace change every time).
    const Replay replay = batch.embed_rows.empty() ? Replay{&cache, kLayersVariant} : Replay{};
    const int64_t T = ops_.begin_forward(batch, positions.data(), replay);
    ops_.store_token_ids(batch, positions.data(), cache);
    const float* image_rows = upload_embeds(batch);
    float* x_final = ops_.run_layers([&] {
        float* x = ops_.alloc(T * H);        // [T, H] residual stream
        float* moe_out = ops_.alloc(T * H);  // [T, H] a layer's MoE output, added by the next norm
        ops_.embed(w_.embed_tokens, batch.token_ids.data(), T, x);
        place_embeds(batch, image_rows, x);
        int64_t kv_layer = 0, gdn_layer = 0;
        const float* pending = nullptr;
        for (const DecoderLayerWeights& l : w_.layers) {
            decoder_layer(l, x, pending, moe_out, T, batch, positions.data(), cache, kv_layer, gdn_layer);
            (l.type == LayerType::kFullAttention ? kv_layer : gdn_layer) += 1;
            pending = moe_out;
        }
        if (pending != nullptr) ops_.add_rms_norm_zc(x, pending, w_.norm, T, H, c.rms_norm_eps, x);
        else ops_.rms_norm_zc(x, w_.norm, T, H, c.rms_norm_eps, x);
        return x;
    });
    return finish(x_final, batch, want_hidden ? HiddenOut::kAllRows : HiddenOut::kNone, std::move(recycled));
}

void Qwen36Model::reserve_mtp_hidden(int64_t max_rows, int64_t max_mtp_rows) {
    const int64_t H = w_.config.hidden_size;
    ops_.persistent(kForwardHidden, max_rows * H);
    ops_.persistent(kMtpHidden, max_mtp_rows * H);
}

void Qwen36Model::take_argmax(Output& out) {
    if (!out.argmax_pending) return;
    ops_.argmax_rows_wait(out.argmax.data());
    out.argmax_pending = false;
}

void Qwen36Model::commit_deferred_state(const ForwardBatch& commit, const std::vector<int32_t>& deferred_rows,
                                        ModelCache& cache) {
    QS_CHECK(commit.seqs.size() == deferred_rows.size());
    if (commit.seqs.empty()) return;
    check_batch(commit, cache);
    for (const SeqSpan& s : commit.seqs) QS_CHECK(!s.defer_state);
    ops_.free_all();
    const std::vector<int32_t> positions = commit.positions();
    ops_.begin_forward(commit, positions.data(), Replay{&cache, kCommitVariant, /*short_spans=*/true, "GDN commit"});
    ops_.run_layers([&]() -> float* {
        int64_t gdn_layer = 0;
        for (const DecoderLayerWeights& l : w_.layers) {
            if (l.type != LayerType::kLinearAttention) continue;
            ops_.gdn_commit(l.gdn, gdn_dims_, commit, deferred_rows, cache, gdn_layer++);
        }
        return nullptr;
    });
}

Qwen36Model::Output Qwen36Model::mtp_forward(const ForwardBatch& batch, const std::vector<float>& hidden,
                                             const std::vector<int32_t>& hidden_rows, ModelCache& cache,
                                             bool want_hidden, Output recycled) {
    const int64_t H = w_.config.hidden_size;
    QS_CHECK(int64_t(hidden.size()) % H == 0);
    const int64_t S = int64_t(hidden.size()) / H;
    float* d = ops_.persistent(kUploadedHidden, S * H);
    ops_.copy_from_host(hidden.data(), S * H, d);
    return mtp_forward(batch, d, S, hidden_rows, cache, want_hidden, std::move(recycled));
}

Qwen36Model::Output Qwen36Model::mtp_forward(const ForwardBatch& batch, const float* hidden, int64_t num_hidden_rows,
                                             const std::vector<int32_t>& hidden_rows, ModelCache& cache,
                                             bool want_hidden, Output recycled) {
    const ModelConfig& c = w_.config;
    const MtpWeights& m = w_.mtp;
    QS_CHECK_MSG(m.present, "the model has no MTP block");
    const int64_t B = batch.num_tokens(), H = c.hidden_size;
    check_batch(batch, cache);
    if (hidden_rows.empty()) {
        QS_CHECK(num_hidden_rows == B);
    } else {
        QS_CHECK(int64_t(hidden_rows.size()) == B);
        for (int32_t r : hidden_rows) QS_CHECK(r >= 0 && r < num_hidden_rows);
    }
    ops_.free_all();
    const std::vector<int32_t> positions = batch.positions();
    // Replayable when the hidden rows are read in order (no row list to upload); the graph reads
    // `hidden` by address, so the address tells the variants apart.
    Replay replay = hidden_rows.empty() && batch.embed_rows.empty()
                        ? Replay{&cache, reinterpret_cast<uintptr_t>(hidden)}
                        : Replay{};
    replay.phase = "MTP head";
    const int64_t T = ops_.begin_forward(batch, positions.data(), replay);  // T ≥ B: padded
    const float* image_rows = upload_embeds(batch);
    float* x_final = ops_.run_layers([&] {
        // u = [norm_e(embed(x_{p+1})) ; norm_h(h_p)]  [T, 2H], embedding first.
        float* e = ops_.alloc(T * H);
        float* hid = ops_.alloc(T * H);
        float* u = ops_.alloc(T * 2 * H);
        float* x = ops_.alloc(T * H);
        ops_.embed(w_.embed_tokens, batch.token_ids.data(), T, e);
        place_embeds(batch, image_rows, e);
        // The hidden rows are copied into this forward's buffers first: `hidden` may be the
        // persistent buffer this step's output goes to. Padding rows get zeros.
        if (hidden_rows.empty()) {
            ops_.copy(hidden, B * H, hid);
        } else {
            ops_.gather_rows(hidden, hidden_rows.data(), B, H, hid);
        }
        if (T > B) ops_.fill_zero(hid + B * H, (T - B) * H);
        ops_.rms_norm_zc(e, m.pre_fc_norm_embedding, T, H, c.rms_norm_eps, e);
        ops_.rms_norm_zc(hid, m.pre_fc_norm_hidden, T, H, c.rms_norm_eps, hid);
        ops_.concat_columns(e, hid, T, H, u);
        ops_.linear(u, T, m.fc, x);
        float* moe_out = ops_.alloc(T * H);  // [T, H] the layer's MoE output, added by the final norm
        decoder_layer(m.layer, x, nullptr, moe_out, T, batch, positions.data(), cache, mtp_kv_layer(), -1);
        ops_.add_rms_norm_zc(x, moe_out, m.norm, T, H, c.rms_norm_eps, x);
        return x;
    });
    return finish(x_final, batch, want_hidden ? HiddenOut::kLogitsRows : HiddenOut::kNone, std::move(recycled));
}

}  // namespace qs

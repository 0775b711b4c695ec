// ForwardBatch: what one forward step computes. Sequences are laid back to back: rows
// [row_begin, row_begin + num_tokens) belong to sequence s. Each sequence has a GDN state slot and
// a block table of KV pages covering positions [0, start_pos + num_tokens). The engine builds it;
// the model and the backends read it. Owned by the engine thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace qs {

struct SeqSpan {
    int32_t row_begin = 0;   // first row of this sequence in the batch
    int32_t num_tokens = 0;  // rows in this forward
    int32_t start_pos = 0;   // tokens already in the caches (position of the first row)
    int32_t state_slot = 0;  // GDN conv + recurrent state slot
    // KV page ids; page i holds positions [i*bs, (i+1)*bs). A view of the sequence's own table
    // (the engine's Sequence::block_table), not a copy: whoever builds a batch keeps those tables
    // unchanged until the batch's forward has run. Qwen36Model checks that it covers the rows.
    std::span<const int32_t> block_table;
    // MTP verification: the GDN layers write the slot's state and conv window after this span's
    // first row only (the sequence's last token, always kept) and stash the span's inputs;
    // Ops::gdn_commit later runs the accepted drafts (rows 1..a) into the slot, and nothing when
    // none was accepted (so a rejected draft needs no backup state and no recompute).
    bool defer_state = false;
    // With defer_state (MTP verification, spare-slot mode): the GDN layers also write the state
    // and conv window after the span's LAST row (every draft accepted) into this slot, which the
    // forward otherwise leaves alone; the span's own slot still ends after its first row. On full
    // acceptance the engine makes this slot the sequence's (no gdn_commit); on none it drops it.
    // -1: none (the accepted drafts are committed by Ops::gdn_commit).
    int32_t spare_slot = -1;
    // M-RoPE (spec §2.3): rows without an entry in ForwardBatch::mrope_positions rotate by
    // position + rope_delta in all three (t/h/w) streams. 0 for text-only sequences; after images
    // it is the sequence's delta from mrope_positions (model/mrope_positions.h).
    int32_t rope_delta = 0;
};

struct ForwardBatch {
    std::vector<int32_t> token_ids;  // [num_tokens]
    std::vector<SeqSpan> seqs;
    std::vector<int32_t> logits_rows;  // rows whose logits are wanted (sorted)
    // Only the argmax of each logits row is wanted (an all-greedy batch): the logits stay in the
    // backend's memory and Output::argmax is filled instead of Output::logits.
    bool argmax_only = false;
    // With argmax_only: the backend may return before the argmax reaches the host; the ids come
    // with Qwen36Model::take_argmax (Ops::argmax_rows_start / argmax_rows_wait), so host work can
    // run while the GPU finishes (the engine's last MTP draft forward of a step).
    bool argmax_deferred = false;
    // With argmax_only: the argmax over token ids [0, argmax_vocab) only, the logits of those
    // alone computed (lm_head's leading rows; MTP drafts with --speculative-draft-vocab). 0: all.
    int64_t argmax_vocab = 0;
    // The logits stay in the backend's memory (Output::device_logits, for Ops::sample) and are
    // not copied to the host. Wins over argmax_only.
    bool logits_on_device = false;
    // M-RoPE positions [3][num_tokens] (t, h, w streams, stream-major) when some row is an image
    // token; empty otherwise. The positions above still index the caches; these only rotate q/k.
    std::vector<int32_t> mrope_positions;
    // Rows whose input embedding replaces embed_tokens[token id] (image tokens): row
    // embed_rows[i] takes embeds[i * hidden, (i + 1) * hidden) (host memory).
    std::vector<int32_t> embed_rows;
    std::vector<float> embeds;

    int64_t num_tokens() const { return int64_t(token_ids.size()); }
    // Position of every row: start_pos + index within its sequence (the cache slot).
    std::vector<int32_t> positions() const;
    // Whether any row's rotary position differs from its position (images, or text after them).
    bool has_mrope() const;
    // Rotary positions [3][num_tokens]: mrope_positions when set, else position + rope_delta.
    std::vector<int32_t> rope_positions() const;
    // Empties the batch, keeping the vectors' capacity (the engine reuses its batches).
    void clear() {
        token_ids.clear();
        seqs.clear();
        logits_rows.clear();
        argmax_only = false;
        argmax_deferred = false;
        argmax_vocab = 0;
        logits_on_device = false;
        mrope_positions.clear();
        embed_rows.clear();
        embeds.clear();
    }
};

}  // namespace qs

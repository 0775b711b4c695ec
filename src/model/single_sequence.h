// SingleSequence: one sequence run through a Qwen36Model with its own small cache (one state
// slot, pages in order). For the `logits` and `generate` commands and the model tests; the
// serving engine schedules many sequences over a shared cache instead. Not thread-safe.
#pragma once

#include <memory>
#include <vector>

#include "backend/model_cache.h"
#include "model/prompt_images.h"
#include "model/qwen36.h"

namespace qs {

class SingleSequence {
public:
    // Room for max_tokens positions (rounded up to whole pages) in the main layers and MTP.
    SingleSequence(Qwen36Model& model, int64_t max_tokens, KvCacheDtype kv_dtype = KvCacheDtype::kF32,
                   int64_t block_size = 16);

    // Feeds tokens (positions length()..length()+n-1) in one forward. Returns logits [n, vocab]
    // when all_rows, else the last row's [vocab]. Keeps the final hidden states of these rows.
    std::vector<float> feed(const std::vector<int32_t>& ids, bool all_rows);

    // Runs the MTP block over rows fed so far: for positions p in [from, length()-1), the draft
    // logits for p+2 from hidden h_p and token x_{p+1}. Returns [length()-1-from, vocab].
    std::vector<float> mtp_over_history(int64_t from);

    // The prompt's images (embeddings at its pad tokens, M-RoPE positions; prompt_images.h), for
    // every later feed and MTP step; null: text only. Must outlive the sequence's forwards.
    void set_images(const PromptImages* images) { images_ = images; }

    int64_t length() const { return int64_t(tokens_.size()); }
    const std::vector<int32_t>& tokens() const { return tokens_; }

private:
    // token_offset: 0 for a target forward, 1 for an MTP forward (rows hold the next token).
    ForwardBatch make_batch(const std::vector<int32_t>& ids, int32_t start_pos, bool all_rows, int token_offset) const;

    Qwen36Model& model_;
    std::unique_ptr<ModelCache> cache_;
    std::vector<int32_t> block_table_;
    std::vector<int32_t> tokens_;
    const PromptImages* images_ = nullptr;
    std::vector<float> hidden_;  // [length(), hidden]: final-normed hidden of every fed row
};

}  // namespace qs

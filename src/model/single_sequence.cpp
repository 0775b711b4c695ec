// SingleSequence (see single_sequence.h).
#include "model/single_sequence.h"

#include <numeric>

#include "core/check.h"

namespace qs {

SingleSequence::SingleSequence(Qwen36Model& model, int64_t max_tokens, KvCacheDtype kv_dtype, int64_t block_size)
    : model_(model) {
    const int64_t num_blocks = (max_tokens + block_size - 1) / block_size;
    cache_ = model.ops().make_cache(
        CacheGeometry::for_model(model.config(), num_blocks, block_size, 1, model.weights().mtp.present, kv_dtype));
    block_table_.resize(static_cast<size_t>(num_blocks));
    std::iota(block_table_.begin(), block_table_.end(), 0);
}

ForwardBatch SingleSequence::make_batch(const std::vector<int32_t>& ids, int32_t start_pos, bool all_rows,
                                        int token_offset) const {
    ForwardBatch b;
    b.token_ids = ids;
    SeqSpan s;
    s.row_begin = 0;
    s.num_tokens = int32_t(ids.size());
    s.start_pos = start_pos;
    s.state_slot = 0;
    s.block_table = block_table_;
    b.seqs.push_back(std::move(s));
    if (all_rows) {
        b.logits_rows.resize(ids.size());
        std::iota(b.logits_rows.begin(), b.logits_rows.end(), 0);
    } else {
        b.logits_rows = {int32_t(ids.size()) - 1};
    }
    if (images_ != nullptr) place_prompt_images(b, {images_}, token_offset);
    return b;
}

std::vector<float> SingleSequence::feed(const std::vector<int32_t>& ids, bool all_rows) {
    QS_CHECK(!ids.empty());
    const int64_t capacity = int64_t(block_table_.size()) * cache_->geometry().block_size;
    QS_CHECK_MSG(length() + int64_t(ids.size()) <= capacity, "SingleSequence: capacity exceeded");
    ForwardBatch b = make_batch(ids, int32_t(length()), all_rows, /*token_offset=*/0);
    Qwen36Model::Output out = model_.forward(b, *cache_, /*want_hidden=*/true);
    tokens_.insert(tokens_.end(), ids.begin(), ids.end());
    hidden_.insert(hidden_.end(), out.hidden.begin(), out.hidden.end());
    return std::move(out.logits);
}

std::vector<float> SingleSequence::mtp_over_history(int64_t from) {
    const int64_t H = model_.config().hidden_size, n = length() - 1 - from;
    QS_CHECK(from >= 0 && n > 0);
    // Row r: token x_{from+r+1}, hidden h_{from+r}, position from+r.
    std::vector<int32_t> ids(tokens_.begin() + from + 1, tokens_.end());
    ForwardBatch b = make_batch(ids, int32_t(from), /*all_rows=*/true, /*token_offset=*/1);
    std::vector<float> hidden(hidden_.begin() + from * H, hidden_.begin() + (from + n) * H);
    return model_.mtp_forward(b, hidden, /*hidden_rows=*/{}, *cache_).logits;
}

}  // namespace qs

// ForwardBatch helpers.
#include "backend/forward_batch.h"

namespace qs {

std::vector<int32_t> ForwardBatch::positions() const {
    std::vector<int32_t> pos(token_ids.size());
    for (const auto& s : seqs)
        for (int32_t i = 0; i < s.num_tokens; ++i) pos[size_t(s.row_begin + i)] = s.start_pos + i;
    return pos;
}

}  // namespace qs

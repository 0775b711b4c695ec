// ForwardBatch helpers.
#include "backend/forward_batch.h"

namespace qs {

std::vector<int32_t> ForwardBatch::positions() const {
    std::vector<int32_t> pos(token_ids.size());
    for (const auto& s : seqs)
        for (int32_t i = 0; i < s.num_tokens; ++i) pos[size_t(s.row_begin + i)] = s.start_pos + i;
    return pos;
}

bool ForwardBatch::has_mrope() const {
    if (!mrope_positions.empty()) return true;
    for (const auto& s : seqs)
        if (s.rope_delta != 0) return true;
    return false;
}

std::vector<int32_t> ForwardBatch::rope_positions() const {
    const size_t T = token_ids.size();
    if (!mrope_positions.empty()) return mrope_positions;
    std::vector<int32_t> pos(3 * T);
    for (const auto& s : seqs)
        for (int32_t i = 0; i < s.num_tokens; ++i)
            for (size_t k = 0; k < 3; ++k) pos[k * T + size_t(s.row_begin + i)] = s.start_pos + i + s.rope_delta;
    return pos;
}

}  // namespace qs

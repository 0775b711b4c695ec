// The engine's side of sampling: one SampleRow (backend/sampling.h) per draw a step needs, made
// from the request's SamplingParams and the sequence's state. The draws themselves run on the
// backend (Ops::sample). Engine thread.
#pragma once

#include <cstdint>
#include <vector>

#include "backend/sampling.h"
#include "engine/request.h"

namespace qs {

struct Sequence;

// The noise stream of completion `completion_index` of a request: from the request's seed when
// it has one (so its tokens are reproducible whatever they are batched with), else random.
uint64_t sampling_key(const SamplingParams& p, int32_t completion_index);

struct SampleRowSpec {
    int32_t logits_row = 0;
    int64_t position = 0;       // position of the forward row whose logits these are
    int64_t draw = 0;           // completion position being drawn (num_output, + r for verify row r)
    int32_t draft = -1;         // the MTP draft this row judges
    bool adjusts_row = true;    // false for fork siblings sharing their parent's (adjusted) row
    int32_t bitmask_row = -1;   // its grammar's mask in SamplingBatch::bitmask, or -1
    int64_t bitmask_words = 0;  // words per mask row (bitmask_words(V))
    // The tokens the mask allows when known (the fill counted them), else -1: counted here.
    int64_t bitmask_allowed = -1;
};

// Appends the row for one draw of `s` (its key: `key`) to `b`: parameters, logit_bias and the
// min_tokens bans (`eos_ids` unless ignore_eos, and stop_token_ids; dropped when the row's
// grammar mask allows nothing else: a complete grammar ends the output), the grammar mask, and,
// when the request has penalties, the block table covering positions [0, position].
void add_sample_row(SamplingBatch& b, const Sequence& s, uint64_t key, const SampleRowSpec& spec,
                    const std::vector<int64_t>& eos_ids, int64_t block_size);

}  // namespace qs

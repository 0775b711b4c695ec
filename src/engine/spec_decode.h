// MTP speculative decoding, the acceptance rule (spec §3.3). The MTP head drafts greedily and
// passes no draft probabilities, so a draft d is a point mass: greedy requests accept d iff it
// is the target's argmax; sampling requests accept d with probability p_target(d) and otherwise
// draw a "recovered" token from p_target with d's mass removed, which keeps the output
// distribution equal to the target's. Engine thread only.
#pragma once

#include <cstdint>

#include "engine/sampler.h"

namespace qs {

struct DraftVerdict {
    bool accepted = false;
    int32_t token = -1;  // the draft if accepted, else the token to emit instead
};

// Judges draft token `draft` against one target logits row (penalties applied here from the
// state's history; the caller records the emitted token).
DraftVerdict verify_draft(const float* logits, int64_t vocab, const SamplingParams& params, SamplerState& state,
                          int32_t draft);

}  // namespace qs

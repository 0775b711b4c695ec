// Whether a forward's deferred GDN spans (SeqSpan::defer_state) need their inputs stashed for
// Ops::gdn_commit. A span with a spare slot (SeqSpan::spare_slot) and at most 2 rows (MTP k = 1)
// has an all-or-nothing verdict: every draft accepted takes the spare slot, none leaves the slot
// as the verify wrote it, so no commit can follow and the backends skip the stash (on CUDA: a
// copy of qkv, b and a per GDN layer). Committing after such a forward is an error.
#pragma once

#include "backend/forward_batch.h"

namespace qs {

inline bool deferred_spans_need_stash(const ForwardBatch& batch) {
    for (const SeqSpan& s : batch.seqs)
        if (s.defer_state && (s.spare_slot < 0 || s.num_tokens > 2)) return true;
    return false;
}

}  // namespace qs

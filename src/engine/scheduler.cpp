// Scheduler (see scheduler.h).
#include "engine/scheduler.h"

#include <algorithm>

#include "core/check.h"

namespace qs {

bool Scheduler::ByPriority::operator()(const Sequence* a, const Sequence* b) const {
    const int32_t pa = a->request->request.priority, pb = b->request->request.priority;
    return pa != pb ? pa < pb : a->id < b->id;
}

Scheduler::Scheduler(const EngineConfig& config, CacheManager& cache) : config_(config), cache_(cache) {}

void Scheduler::add_waiting(Sequence* s) {
    s->status = SeqStatus::kWaiting;
    waiting_.insert(s);
}

void Scheduler::add_running(Sequence* s) {
    s->status = SeqStatus::kRunning;
    insert_running(s);
}

void Scheduler::insert_running(Sequence* s) {
    running_.insert(std::upper_bound(running_.begin(), running_.end(), s, ByPriority()), s);
}

std::vector<Sequence*>::iterator Scheduler::find_running(Sequence* s) {
    // ByPriority is a strict total order (ids are unique), so the sorted vector has s at its
    // lower bound if anywhere.
    auto it = std::lower_bound(running_.begin(), running_.end(), s, ByPriority());
    return it != running_.end() && *it == s ? it : running_.end();
}

void Scheduler::remove(Sequence* s) {
    waiting_.erase(s);
    auto it = find_running(s);
    if (it != running_.end()) running_.erase(it);
    cache_.free_sequence(*s);
}

void Scheduler::preempt(Sequence* s) {
    auto it = find_running(s);
    QS_CHECK(it != running_.end());
    running_.erase(it);
    cache_.free_sequence(*s);  // recompute later: prompt + output so far
    add_waiting(s);
    ++preemptions_total_;
}

int64_t Scheduler::wanted_rows(const Sequence& s) const {
    const int64_t uncomputed = s.num_uncomputed();
    return uncomputed == 1 ? 1 + int64_t(s.draft.size()) : uncomputed;
}

int64_t Scheduler::align_chunk(const Sequence& s, int64_t n) const {
    const int64_t b = cache_.snapshot_boundary(s);
    if (b > s.num_computed && b < s.num_computed + n) return b - s.num_computed;
    return n;
}

SchedulerOutput Scheduler::schedule() {
    SchedulerOutput out;
    out.scheduled.reserve(running_.size() + 1);
    int64_t budget = config_.max_num_batched_tokens;
    // Latency policy: while sequences decode, prompt rows per step are capped, so a long prefill
    // cannot stretch the step every decoding sequence waits on (ITL). Without decodes (a server
    // filling up) prompts get the whole budget.
    int64_t prefill_budget = budget;
    if (config_.max_prefill_tokens_with_decodes > 0)
        for (const Sequence* s : running_)
            if (s->num_uncomputed() == 1) {
                prefill_budget = config_.max_prefill_tokens_with_decodes;
                break;
            }

    // Stage 1: running sequences, highest priority first (running_ is kept in that order; the
    // copy is walked because preemption removes sequences from running_).
    order_.assign(running_.begin(), running_.end());
    for (Sequence* s : order_) {
        if (s->status != SeqStatus::kRunning) continue;  // preempted earlier in this loop
        if (budget <= 0) break;
        int64_t n = wanted_rows(*s);
        bool verify = s->num_uncomputed() == 1 && !s->draft.empty();
        if (verify && n > budget) {  // no room for the drafts: plain decode
            s->draft.clear();
            verify = false;
            n = 1;
        }
        const bool prefill = s->num_uncomputed() > 1;
        if (prefill) {
            if (prefill_budget <= 0) continue;
            n = std::min(n, prefill_budget);
        }
        if (!verify) n = align_chunk(*s, std::min(n, budget));
        if (!config_.enable_chunked_prefill && n < s->num_uncomputed()) continue;
        // Make room: preempt the lowest-priority, latest running sequence until the pages fit.
        bool self_preempted = false;
        while (!cache_.ensure_blocks(*s, s->num_computed + n)) {
            Sequence* victim = running_.back();  // the maximum under ByPriority
            preempt(victim);
            ++out.num_preempted;
            if (victim == s) {
                self_preempted = true;
                break;
            }
        }
        if (self_preempted) continue;
        out.scheduled.push_back({s, n, verify});
        budget -= n;
        if (prefill) prefill_budget -= n;
    }

    // Stage 2: admit waiting sequences while slots, pages and budget last (never preempting).
    while (!waiting_.empty() && budget > 0 && prefill_budget > 0 && int64_t(running_.size()) < config_.max_num_seqs &&
           cache_.has_free_slot() && out.num_preempted == 0) {
        Sequence* s = *waiting_.begin();
        s->slot = cache_.acquire_slot();
        const int64_t hit = cache_.apply_prefix_hit(*s);
        int64_t n = s->num_uncomputed();
        const int64_t room = std::min(budget, prefill_budget);
        if (!config_.enable_chunked_prefill && n > room) {
            cache_.free_sequence(*s);
            break;
        }
        n = align_chunk(*s, std::min(n, room));
        if (!cache_.ensure_blocks(*s, s->num_computed + n)) {
            cache_.free_sequence(*s);
            break;
        }
        waiting_.erase(waiting_.begin());
        if (s->num_output() == 0) {  // first admission (recomputes after preemption don't count)
            prefix_queries_ += int64_t(s->tokens.size());
            prefix_hits_ += hit;
            s->num_cached_prompt = hit;
        }
        s->status = SeqStatus::kRunning;
        insert_running(s);
        out.scheduled.push_back({s, n, false});
        budget -= n;
        prefill_budget -= n;
    }
    return out;
}

}  // namespace qs

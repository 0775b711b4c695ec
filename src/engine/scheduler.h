// Scheduler: decides what one forward step computes, in two stages. Capacity: which sequences
// fit in KV pages and GDN state slots (admitting waiting sequences in priority then arrival
// order, preempting the lowest-priority, latest running sequence by recompute when pages run
// out). Token budget: running sequences first (decodes, MTP verifies, unfinished prefills), then
// prefill chunks of newly admitted ones, up to max_num_batched_tokens rows. Engine thread only.
#pragma once

#include <cstdint>
#include <set>
#include <vector>

#include "engine/cache_manager.h"
#include "engine/engine_config.h"
#include "engine/sequence.h"

namespace qs {

struct ScheduledSeq {
    Sequence* seq;
    int64_t num_tokens;  // rows this step: tokens [num_computed, num_computed + num_tokens)
    bool verify;         // rows are the last token + its MTP drafts
};

struct SchedulerOutput {
    std::vector<ScheduledSeq> scheduled;
    int64_t num_preempted = 0;
};

class Scheduler {
public:
    Scheduler(const EngineConfig& config, CacheManager& cache);

    void add_waiting(Sequence* s);
    // A sequence that already holds a slot and pages (a fork of a running one).
    void add_running(Sequence* s);
    // Removes a sequence wherever it is (abort, finish); frees its memory.
    void remove(Sequence* s);
    SchedulerOutput schedule();

    int64_t num_waiting() const { return int64_t(waiting_.size()); }
    int64_t num_running() const { return int64_t(running_.size()); }
    // In scheduling order: priority, then arrival.
    const std::vector<Sequence*>& running() const { return running_; }
    int64_t num_preemptions_total() const { return preemptions_total_; }
    // Tokens looked up in / served from the prefix cache at admission.
    int64_t prefix_cache_queries() const { return prefix_queries_; }
    int64_t prefix_cache_hits() const { return prefix_hits_; }
    // Zeroes the counters above (after the engine's start-up graph capture ran its own requests).
    void reset_counters() { preemptions_total_ = prefix_queries_ = prefix_hits_ = 0; }

private:
    struct ByPriority {
        bool operator()(const Sequence* a, const Sequence* b) const;
    };
    void preempt(Sequence* s);
    // running_ stays sorted by ByPriority: insert at the upper bound, find by binary search.
    void insert_running(Sequence* s);
    std::vector<Sequence*>::iterator find_running(Sequence* s);
    // Rows a running sequence wants this step (before the budget cut).
    int64_t wanted_rows(const Sequence& s) const;
    // Cuts a prefill chunk so it ends at the sequence's snapshot boundary when it would cross it.
    int64_t align_chunk(const Sequence& s, int64_t n) const;

    const EngineConfig& config_;
    CacheManager& cache_;
    std::set<Sequence*, ByPriority> waiting_;
    std::vector<Sequence*> running_;  // sorted by ByPriority (priority, then arrival)
    std::vector<Sequence*> order_;    // schedule()'s copy of running_ (capacity kept)
    int64_t preemptions_total_ = 0;
    int64_t prefix_queries_ = 0;
    int64_t prefix_hits_ = 0;
};

}  // namespace qs

// Scheduler on its own (no Engine, no model), over a CacheManager whose cache stores nothing:
// admission is bounded by slots and pages, running sequences get their rows before new prompts,
// prefills are chunked to max_num_batched_tokens and cut at the snapshot boundary, preemption
// takes the lowest-priority, latest-arriving sequence, and MTP verify rows fall back to a plain
// decode when the budget cannot hold them. The test plays the engine: after each schedule()
// it marks the rows computed and appends a token to every sequence that reached its end.
#include <gtest/gtest.h>

#include <utility>

#include "memory_test_util.h"

namespace qs {
namespace {

using test::count_to;
using test::MemoryRig;

// (sequence id, rows) per scheduled sequence, in schedule order.
using Rows = std::vector<std::pair<int64_t, int64_t>>;

Rows rows_of(const SchedulerOutput& out) {
    Rows r;
    for (const auto& s : out.scheduled) r.push_back({s.seq->id, s.num_tokens});
    return r;
}

// What the engine does after the forward: rows computed, pages registered, and a sampled token
// (1000 + id) for each sequence whose known tokens are now all computed.
void play_forward(const SchedulerOutput& out, CacheManager& m) {
    for (const auto& s : out.scheduled) {
        s.seq->num_computed += s.num_tokens;
        m.after_forward(*s.seq);
        if (s.seq->num_uncomputed() == 0) s.seq->tokens.push_back(int32_t(1000 + s.seq->id));
    }
}

struct Rig : MemoryRig {
    Scheduler scheduler;
    Rig(int64_t num_blocks, int64_t running, int64_t snapshots, bool mtp, bool prefix, int64_t budget)
        : MemoryRig(num_blocks, /*block_size=*/4, running, snapshots, mtp, prefix), scheduler(config, *manager) {
        config.max_num_batched_tokens = budget;
    }
    Sequence* submit(int64_t id, std::vector<int32_t> prompt, int32_t priority = 0) {
        Sequence* s = make_seq(id, std::move(prompt), priority);
        scheduler.add_waiting(s);
        return s;
    }
};

TEST(Scheduler, AdmissionIsBoundedByRunningSlots) {
    Rig rig(64, /*running=*/2, 0, false, false, 100);
    for (int i = 0; i < 3; ++i) rig.submit(i, count_to(3));
    const SchedulerOutput out = rig.scheduler.schedule();
    EXPECT_EQ(rows_of(out), (Rows{{0, 3}, {1, 3}}));
    EXPECT_EQ(rig.scheduler.num_running(), 2);
    EXPECT_EQ(rig.scheduler.num_waiting(), 1);
    EXPECT_EQ(rig.manager->num_slots_in_use(), 2);

    // max_num_seqs below the slots the cache has: it is the bound.
    Rig one(64, 2, 0, 0, false, 100);
    one.config.max_num_seqs = 1;
    for (int i = 0; i < 2; ++i) one.submit(i, count_to(3));
    EXPECT_EQ(rows_of(one.scheduler.schedule()), (Rows{{0, 3}}));
    EXPECT_EQ(one.manager->num_slots_in_use(), 1);
}

TEST(Scheduler, AdmissionIsBoundedByPagesInArrivalOrder) {
    Rig rig(/*num_blocks=*/3, 4, 0, false, false, 100);
    Sequence* a = rig.submit(0, count_to(5));  // 2 pages
    Sequence* b = rig.submit(1, count_to(5));  // 2 pages: only 1 left
    rig.submit(2, count_to(2));                // 1 page would fit, but b is ahead of it
    const SchedulerOutput out = rig.scheduler.schedule();
    EXPECT_EQ(rows_of(out), (Rows{{0, 5}}));
    EXPECT_EQ(a->block_table.size(), 2u);
    EXPECT_EQ(b->slot, -1);  // its slot was given back
    EXPECT_TRUE(b->block_table.empty());
    EXPECT_EQ(rig.scheduler.num_waiting(), 2);
    EXPECT_EQ(rig.manager->num_slots_in_use(), 1);
    EXPECT_EQ(rig.manager->pool().num_in_use(), 2);
}

TEST(Scheduler, DecodesFirstThenPrefillChunksUpToTheBudget) {
    Rig rig(64, 4, 0, false, false, /*budget=*/10);
    rig.submit(0, count_to(3));
    rig.submit(1, count_to(3));
    SchedulerOutput out = rig.scheduler.schedule();
    EXPECT_EQ(rows_of(out), (Rows{{0, 3}, {1, 3}}));
    play_forward(out, *rig.manager);  // both now decode one row each

    rig.submit(2, count_to(20));
    out = rig.scheduler.schedule();
    EXPECT_EQ(rows_of(out), (Rows{{0, 1}, {1, 1}, {2, 8}}));  // 10 - 2 decode rows = 8 of the prompt
    play_forward(out, *rig.manager);
    out = rig.scheduler.schedule();
    EXPECT_EQ(rows_of(out), (Rows{{0, 1}, {1, 1}, {2, 8}}));  // 12 left, 8 fit
    play_forward(out, *rig.manager);
    out = rig.scheduler.schedule();
    EXPECT_EQ(rows_of(out), (Rows{{0, 1}, {1, 1}, {2, 4}}));  // the last 4
}

// The latency policy: while any sequence decodes, prompt rows per step (running chunks and new
// admissions together) stay within max_prefill_tokens_with_decodes; a step with no decodes
// gives prompts the whole budget.
TEST(Scheduler, PrefillRowsAreCappedWhileSequencesDecode) {
    Rig rig(64, 4, 0, false, false, /*budget=*/10);
    rig.config.max_prefill_tokens_with_decodes = 3;
    rig.submit(0, count_to(6));
    rig.submit(1, count_to(6));
    SchedulerOutput out = rig.scheduler.schedule();
    EXPECT_EQ(rows_of(out), (Rows{{0, 6}, {1, 4}}));  // nobody decodes yet: the whole budget
    play_forward(out, *rig.manager);
    rig.submit(2, count_to(9));
    out = rig.scheduler.schedule();
    // 0 decodes: 3 prompt rows in all, to 1's rest (2) then 2's first chunk (1).
    EXPECT_EQ(rows_of(out), (Rows{{0, 1}, {1, 2}, {2, 1}}));
    play_forward(out, *rig.manager);
    out = rig.scheduler.schedule();
    EXPECT_EQ(rows_of(out), (Rows{{0, 1}, {1, 1}, {2, 3}}));  // both decode; 2 gets the 3
    play_forward(out, *rig.manager);

    // Off (0): the same state takes the whole budget.
    Rig off(64, 4, 0, false, false, 10);
    off.submit(0, count_to(6));
    off.submit(1, count_to(6));
    out = off.scheduler.schedule();
    play_forward(out, *off.manager);
    off.submit(2, count_to(9));
    EXPECT_EQ(rows_of(off.scheduler.schedule()), (Rows{{0, 1}, {1, 2}, {2, 7}}));
}

TEST(Scheduler, WithoutChunkedPrefillAPromptWaitsForRoomForAllOfIt) {
    Rig rig(64, 4, 0, false, false, /*budget=*/10);
    rig.config.enable_chunked_prefill = false;
    rig.submit(0, count_to(3));
    Sequence* big = rig.submit(1, count_to(8));  // 8 > the 7 rows left
    const SchedulerOutput out = rig.scheduler.schedule();
    EXPECT_EQ(rows_of(out), (Rows{{0, 3}}));
    EXPECT_EQ(big->slot, -1);
    EXPECT_EQ(rig.scheduler.num_waiting(), 1);
    EXPECT_EQ(rig.manager->num_slots_in_use(), 1);
}

TEST(Scheduler, PreemptsTheLowestPriorityLatestArrivalFirst) {
    // 5 pages of 4 tokens; four 4-token prompts take one page each. Lower priority values run
    // first: the order is A (0, arrived 1), D (0, arrived 4), B (1, arrived 2), C (1, arrived 3).
    Rig rig(/*num_blocks=*/5, 4, 0, false, false, 100);
    Sequence* A = rig.submit(1, count_to(4), 0);
    Sequence* B = rig.submit(2, count_to(4), 1);
    Sequence* C = rig.submit(3, count_to(4), 1);
    Sequence* D = rig.submit(4, count_to(4), 0);
    SchedulerOutput out = rig.scheduler.schedule();
    EXPECT_EQ(rows_of(out), (Rows{{1, 4}, {4, 4}, {2, 4}, {3, 4}}));
    EXPECT_EQ(rig.manager->pool().num_available(), 1);
    play_forward(out, *rig.manager);

    // Every decode now needs a second page, and one is free. A takes it; D makes room by
    // preempting C (lowest priority, latest); B finds no one below itself and is preempted.
    // D, the latest arrival of all, keeps running: priority comes before arrival.
    out = rig.scheduler.schedule();
    EXPECT_EQ(rows_of(out), (Rows{{1, 1}, {4, 1}}));
    EXPECT_EQ(out.num_preempted, 2);
    EXPECT_EQ(rig.scheduler.num_preemptions_total(), 2);
    EXPECT_EQ(rig.scheduler.num_running(), 2);
    EXPECT_EQ(rig.scheduler.num_waiting(), 2);
    EXPECT_EQ(D->status, SeqStatus::kRunning);
    for (Sequence* s : {B, C}) {
        EXPECT_EQ(s->status, SeqStatus::kWaiting);
        EXPECT_EQ(s->slot, -1);
        EXPECT_TRUE(s->block_table.empty());
        EXPECT_EQ(s->num_computed, 0);
        EXPECT_EQ(s->tokens.size(), 5u);  // prompt + the token sampled before: recomputed later
    }
    play_forward(out, *rig.manager);

    // A finishes: 3 pages are free. B (arrived before C) is readmitted first and recomputes its
    // 5 tokens (2 pages); C needs 2 as well and finds 1.
    rig.scheduler.remove(A);
    out = rig.scheduler.schedule();
    EXPECT_EQ(rows_of(out), (Rows{{4, 1}, {2, 5}}));
    EXPECT_EQ(C->slot, -1);
    EXPECT_EQ(rig.scheduler.num_waiting(), 1);
    EXPECT_EQ(rig.scheduler.prefix_cache_queries(), 16);  // first admissions only: 4 × 4 prompt tokens
}

TEST(Scheduler, PrefillIsCutAtTheSnapshotBoundaryAndLaterPromptsHitIt) {
    Rig rig(64, 4, /*snapshots=*/2, false, /*prefix=*/true, 100);
    Sequence* a = rig.submit(0, count_to(10));
    SchedulerOutput out = rig.scheduler.schedule();
    EXPECT_EQ(rows_of(out), (Rows{{0, 8}}));  // cut at (10 - 1) / 4 * 4 = 8 so the state there is kept
    play_forward(out, *rig.manager);
    EXPECT_EQ(rig.manager->snapshots().size(), 1);
    out = rig.scheduler.schedule();
    EXPECT_EQ(rows_of(out), (Rows{{0, 2}}));
    play_forward(out, *rig.manager);

    std::vector<int32_t> p = count_to(8);
    p.insert(p.end(), {50, 51, 52});
    Sequence* b = rig.submit(1, p);
    out = rig.scheduler.schedule();
    EXPECT_EQ(rows_of(out), (Rows{{0, 1}, {1, 3}}));  // b starts at 8 (the hit) and computes 3
    EXPECT_EQ(b->num_cached_prompt, 8);
    EXPECT_EQ(std::vector<int32_t>(b->block_table.begin(), b->block_table.begin() + 2),
              std::vector<int32_t>(a->block_table.begin(), a->block_table.begin() + 2));
    EXPECT_EQ(rig.scheduler.prefix_cache_queries(), 10 + 11);
    EXPECT_EQ(rig.scheduler.prefix_cache_hits(), 8);
}

TEST(Scheduler, VerifyRowsNeedRoomForEveryDraft) {
    Rig rig(64, 2, 0, /*mtp=*/true, false, 100);
    Sequence* a = rig.submit(0, count_to(3));
    play_forward(rig.scheduler.schedule(), *rig.manager);
    a->draft = {7, 8};
    SchedulerOutput out = rig.scheduler.schedule();
    ASSERT_EQ(out.scheduled.size(), 1u);
    EXPECT_EQ(out.scheduled[0].num_tokens, 3);  // the last token + 2 drafts
    EXPECT_TRUE(out.scheduled[0].verify);
    EXPECT_EQ(a->block_table.size(), 2u);       // positions up to 6: 2 pages

    rig.config.max_num_batched_tokens = 2;      // no room for the drafts: a plain decode
    out = rig.scheduler.schedule();
    ASSERT_EQ(out.scheduled.size(), 1u);
    EXPECT_EQ(out.scheduled[0].num_tokens, 1);
    EXPECT_FALSE(out.scheduled[0].verify);
    EXPECT_TRUE(a->draft.empty());
}

}  // namespace
}  // namespace qs

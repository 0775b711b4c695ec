// CacheManager on its own (no Engine, no model): pages are allocated whole or not at all, a freed
// sequence gives everything back, snapshots are taken only at the prompt's last page boundary,
// a prefix hit ends at the last stored snapshot, a fork shares full pages and copies the partial
// page and the state (and, with MTP, the full page of the last position). Expected ids follow
// from two documented orders: BlockPool and the running slots hand out their lowest free id
// first. The cache stores nothing; its storage records what was copied.
#include <gtest/gtest.h>

#include "memory_test_util.h"

namespace qs {
namespace {

using test::CacheOp;
using test::count_to;
using test::MemoryRig;

std::vector<int32_t> ids(std::initializer_list<int32_t> l) { return l; }

TEST(CacheManager, EnsureBlocksAllocatesWholePagesOrNothing) {
    MemoryRig rig(/*num_blocks=*/5, /*block_size=*/4, /*running=*/2, 0, /*mtp=*/false, /*prefix_caching=*/false);
    CacheManager& m = *rig.manager;
    Sequence* s = rig.make_seq(0, count_to(10));
    s->slot = m.acquire_slot();
    ASSERT_TRUE(m.ensure_blocks(*s, 10));  // ceil(10 / 4) = 3 pages
    EXPECT_EQ(s->block_table, ids({0, 1, 2}));
    EXPECT_EQ(m.pool().num_available(), 2);
    EXPECT_TRUE(m.ensure_blocks(*s, 12));  // 12 positions still fit in 3 pages
    EXPECT_EQ(s->block_table.size(), 3u);
    // 21 positions need 6 pages: 3 more, but only 2 are left. Nothing is taken.
    EXPECT_FALSE(m.ensure_blocks(*s, 21));
    EXPECT_EQ(s->block_table, ids({0, 1, 2}));
    EXPECT_EQ(m.pool().num_available(), 2);
    EXPECT_TRUE(m.ensure_blocks(*s, 20));  // 5 pages: the last 2
    EXPECT_EQ(s->block_table, ids({0, 1, 2, 3, 4}));
    EXPECT_EQ(m.pool().num_available(), 0);
    EXPECT_TRUE(m.ensure_blocks(*s, 20));  // already backed: true with an empty pool
    EXPECT_FALSE(m.ensure_blocks(*s, 21));
}

TEST(CacheManager, SlotsAreZeroedWhenTakenAndComeBack) {
    MemoryRig rig(4, 4, /*running=*/2, /*snapshots=*/1, false, true);
    CacheManager& m = *rig.manager;
    EXPECT_EQ(m.acquire_slot(), 0);
    EXPECT_EQ(m.acquire_slot(), 1);
    EXPECT_FALSE(m.has_free_slot());  // the snapshot slot (2) is not a running slot
    EXPECT_EQ(m.num_slots_in_use(), 2);
    EXPECT_EQ(rig.take_ops(), (std::vector<CacheOp>{{CacheOp::kResetSlot, 0, -1}, {CacheOp::kResetSlot, 1, -1}}));
    Sequence* s = rig.make_seq(0, count_to(3));
    s->slot = 1;
    m.free_sequence(*s);
    EXPECT_TRUE(m.has_free_slot());
    EXPECT_EQ(m.acquire_slot(), 1);
    EXPECT_EQ(rig.take_ops(), (std::vector<CacheOp>{{CacheOp::kResetSlot, 1, -1}}));
}

// MTP spare slots (--mtp-spare-slots) come after the running and snapshot slots; a borrowed
// spare either comes back or, taken on a full acceptance, becomes the sequence's slot while its
// old slot joins the spares; the running slots in use stay the same. Nothing is zeroed or copied
// (the verify writes all of a spare).
TEST(CacheManager, SpareSlotsAreBorrowedAndSwapped) {
    MemoryRig rig(4, 4, /*running=*/2, /*snapshots=*/1, /*mtp=*/true, true, xxh3_page_hash, /*spares=*/2);
    CacheManager& m = *rig.manager;
    Sequence* s = rig.make_seq(0, count_to(3));
    s->slot = m.acquire_slot();
    EXPECT_EQ(s->slot, 0);
    rig.take_ops();
    EXPECT_EQ(m.num_free_spares(), 2);
    const int32_t a = m.borrow_spare(), b = m.borrow_spare();
    EXPECT_EQ(a, 3);  // after running 0..1 and snapshot 2
    EXPECT_EQ(b, 4);
    EXPECT_EQ(m.borrow_spare(), -1);  // none left: that sequence commits as before
    m.return_spare(b);
    m.take_spare(*s, a);
    EXPECT_EQ(s->slot, 3);
    EXPECT_EQ(m.num_free_spares(), 2);
    EXPECT_EQ(m.num_slots_in_use(), 1);
    EXPECT_EQ(m.borrow_spare(), 0);  // the sequence's old slot is now a spare
    EXPECT_TRUE(rig.take_ops().empty());
    m.free_sequence(*s);  // its slot (a former spare) goes back to the running slots
    EXPECT_EQ(m.num_slots_in_use(), 0);
    EXPECT_EQ(m.acquire_slot(), 3);
}

TEST(CacheManager, FreeSequenceGivesEverythingBack) {
    MemoryRig rig(6, 4, 2, 0, false, false);
    CacheManager& m = *rig.manager;
    Sequence* a = rig.make_seq(0, count_to(10));
    a->slot = m.acquire_slot();
    ASSERT_TRUE(m.ensure_blocks(*a, 10));  // pages 0, 1, 2
    a->num_computed = 10;
    a->draft = {7, 8};
    Sequence* b = rig.make_sibling(*a, 1);
    ASSERT_TRUE(m.fork(*a, *b));  // shares pages 0 and 1, copies 2 into 3
    EXPECT_EQ(m.pool().num_in_use(), 4);

    m.free_sequence(*a);
    EXPECT_TRUE(a->block_table.empty());
    EXPECT_TRUE(a->prefix_pages.empty());
    EXPECT_TRUE(a->draft.empty());
    EXPECT_EQ(a->slot, -1);
    EXPECT_EQ(a->num_computed, 0);
    // The shared pages stay with b; a's own page 2 is free again.
    EXPECT_EQ(m.pool().ref_count(0), 1);
    EXPECT_EQ(m.pool().ref_count(1), 1);
    EXPECT_EQ(m.pool().ref_count(2), 0);
    EXPECT_EQ(m.pool().num_in_use(), 3);
    EXPECT_EQ(m.num_slots_in_use(), 1);

    m.free_sequence(*b);
    EXPECT_EQ(m.pool().num_in_use(), 0);
    EXPECT_EQ(m.pool().num_available(), 6);
    EXPECT_EQ(m.num_slots_in_use(), 0);
}

TEST(CacheManager, SnapshotBoundaryIsThePromptsLastPageBoundary) {
    MemoryRig rig(8, 4, 2, /*snapshots=*/2, false, true);
    auto boundary = [&](int32_t prompt) { return rig.manager->snapshot_boundary(*rig.make_seq(prompt, count_to(prompt))); };
    EXPECT_EQ(boundary(10), 8);  // (10 - 1) / 4 * 4
    EXPECT_EQ(boundary(9), 8);
    EXPECT_EQ(boundary(8), 4);   // the last prompt token is always computed, so not 8
    EXPECT_EQ(boundary(5), 4);
    EXPECT_EQ(boundary(4), -1);  // would be 0: nothing to snapshot
    EXPECT_EQ(boundary(1), -1);

    MemoryRig off(8, 4, 2, 2, 0, /*prefix_caching=*/false);
    EXPECT_EQ(off.manager->snapshot_boundary(*off.make_seq(0, count_to(10))), -1);
    MemoryRig no_slots(8, 4, 2, /*snapshots=*/0, 0, true);
    EXPECT_EQ(no_slots.manager->snapshot_boundary(*no_slots.make_seq(0, count_to(10))), -1);
}

TEST(CacheManager, NoSnapshotWhenTheForwardCrossesTheBoundary) {
    MemoryRig rig(8, 4, 2, 2, false, true);
    CacheManager& m = *rig.manager;
    Sequence* a = rig.make_seq(0, count_to(10));
    a->slot = m.acquire_slot();
    ASSERT_TRUE(m.ensure_blocks(*a, 10));
    rig.take_ops();
    a->num_computed = 10;  // past the boundary (8) in one forward
    m.after_forward(*a);
    EXPECT_EQ(a->prefix_pages.size(), 2u);  // pages 0 and 1 are full and registered
    EXPECT_EQ(m.pool().num_cached(), 2);
    EXPECT_EQ(m.snapshots().size(), 0);
    EXPECT_TRUE(rig.ops.empty());

    // Its pages are cached, but without a snapshot there is no state to start from: no hit.
    std::vector<int32_t> p = count_to(8);
    p.insert(p.end(), {50, 51});
    Sequence* b = rig.make_seq(1, p);
    b->slot = m.acquire_slot();
    EXPECT_EQ(m.apply_prefix_hit(*b), 0);
    EXPECT_TRUE(b->block_table.empty());
    EXPECT_EQ(b->num_computed, 0);
    EXPECT_EQ(m.pool().ref_count(0), 1);
}

TEST(CacheManager, PrefixHitEndsAtTheLastSnapshot) {
    MemoryRig rig(8, 4, /*running=*/3, /*snapshots=*/2, false, true);  // snapshot slots 3 and 4
    CacheManager& m = *rig.manager;
    Sequence* a = rig.make_seq(0, count_to(10));
    a->slot = m.acquire_slot();  // 0
    ASSERT_TRUE(m.ensure_blocks(*a, 10));  // pages 0, 1, 2
    rig.take_ops();
    a->num_computed = 8;  // the chunk the scheduler cuts at the boundary
    m.after_forward(*a);
    ASSERT_EQ(m.snapshots().size(), 1);
    ASSERT_EQ(rig.ops.size(), 1u);
    const CacheOp snap = rig.take_ops()[0];
    EXPECT_EQ(snap.kind, CacheOp::kCopySlot);
    EXPECT_EQ(snap.from, 0);
    EXPECT_TRUE(snap.to == 3 || snap.to == 4) << snap.to;
    // The rest of the prompt and two decoded tokens: page 2 (positions 8..11) becomes full and
    // is cached, but no snapshot is taken past the prompt's boundary.
    a->num_computed = 10;
    m.after_forward(*a);
    a->tokens.insert(a->tokens.end(), {11, 12});
    a->num_computed = 12;
    m.after_forward(*a);
    EXPECT_EQ(m.pool().num_cached(), 3);
    EXPECT_EQ(m.snapshots().size(), 1);
    EXPECT_TRUE(rig.ops.empty());

    // b extends all 12 of a's tokens: three cached pages match, the hit stops at the snapshot (8).
    std::vector<int32_t> pb = a->tokens;
    pb.push_back(99);
    Sequence* b = rig.make_seq(1, pb);
    b->slot = m.acquire_slot();  // 1
    rig.take_ops();
    EXPECT_EQ(m.apply_prefix_hit(*b), 8);
    EXPECT_EQ(b->num_computed, 8);
    EXPECT_EQ(b->block_table, ids({0, 1}));
    EXPECT_EQ(b->prefix_pages, std::vector<PrefixPage>(a->prefix_pages.begin(), a->prefix_pages.begin() + 2));
    EXPECT_EQ(m.pool().ref_count(0), 2);
    EXPECT_EQ(m.pool().ref_count(1), 2);
    EXPECT_EQ(m.pool().ref_count(2), 1);  // matched but past the snapshot: not taken
    EXPECT_EQ(rig.take_ops(), (std::vector<CacheOp>{{CacheOp::kCopySlot, snap.to, 1}}));

    // A prompt that is exactly the first 8 tokens may only reuse page 0 (its last token must be
    // computed for logits), and page 0 has no snapshot: no hit.
    Sequence* c = rig.make_seq(2, count_to(8));
    c->slot = m.acquire_slot();  // 2
    EXPECT_EQ(m.apply_prefix_hit(*c), 0);
    EXPECT_TRUE(c->block_table.empty());
    // A prompt that differs in its first page misses outright.
    m.free_sequence(*c);
    std::vector<int32_t> pd = a->tokens;
    pd[0] = 100;
    Sequence* d = rig.make_seq(3, pd);
    d->slot = m.acquire_slot();
    EXPECT_EQ(m.apply_prefix_hit(*d), 0);
    EXPECT_EQ(m.pool().ref_count(0), 2);
}

TEST(CacheManager, ForkSharesFullPagesAndCopiesThePartialPageAndTheState) {
    MemoryRig rig(8, 4, 3, 0, false, false);
    CacheManager& m = *rig.manager;
    Sequence* p = rig.make_seq(0, count_to(10));
    p->slot = m.acquire_slot();  // 0
    ASSERT_TRUE(m.ensure_blocks(*p, 10));  // pages 0, 1 full; 2 holds positions 8, 9
    p->num_computed = 10;
    rig.take_ops();
    Sequence* c = rig.make_sibling(*p, 1);
    ASSERT_TRUE(m.fork(*p, *c));
    EXPECT_EQ(c->slot, 1);
    EXPECT_EQ(c->block_table, ids({0, 1, 3}));
    EXPECT_EQ(c->num_computed, 10);
    EXPECT_EQ(rig.take_ops(), (std::vector<CacheOp>{{CacheOp::kCopySlot, 0, 1}, {CacheOp::kCopyBlock, 2, 3}}));
    EXPECT_EQ(m.pool().ref_count(0), 2);
    EXPECT_EQ(m.pool().ref_count(1), 2);
    EXPECT_EQ(m.pool().ref_count(2), 1);
    EXPECT_EQ(m.pool().ref_count(3), 1);
    EXPECT_EQ(m.num_slots_in_use(), 2);
}

TEST(CacheManager, ForkOfAFullLastPageSharesItUnlessMtpWritesIt) {
    {
        MemoryRig rig(8, 4, 3, 0, /*mtp=*/false, false);
        CacheManager& m = *rig.manager;
        Sequence* p = rig.make_seq(0, count_to(8));
        p->slot = m.acquire_slot();
        ASSERT_TRUE(m.ensure_blocks(*p, 8));  // pages 0, 1, both full
        p->num_computed = 8;
        rig.take_ops();
        Sequence* c = rig.make_sibling(*p, 1);
        ASSERT_TRUE(m.fork(*p, *c));
        EXPECT_EQ(c->block_table, ids({0, 1}));
        EXPECT_EQ(rig.take_ops(), (std::vector<CacheOp>{{CacheOp::kCopySlot, 0, 1}}));
        EXPECT_EQ(m.pool().num_in_use(), 2);
    }
    {
        // With MTP the page of the last computed position is private: page 1 is copied into 2.
        MemoryRig rig(8, 4, 3, 0, /*mtp=*/true, false);
        CacheManager& m = *rig.manager;
        Sequence* p = rig.make_seq(0, count_to(8));
        p->slot = m.acquire_slot();
        ASSERT_TRUE(m.ensure_blocks(*p, 8));
        p->num_computed = 8;
        rig.take_ops();
        Sequence* c = rig.make_sibling(*p, 1);
        ASSERT_TRUE(m.fork(*p, *c));
        EXPECT_EQ(c->block_table, ids({0, 2}));
        EXPECT_EQ(rig.take_ops(), (std::vector<CacheOp>{{CacheOp::kCopySlot, 0, 1}, {CacheOp::kCopyBlock, 1, 2}}));
        EXPECT_EQ(m.pool().ref_count(0), 2);
        EXPECT_EQ(m.pool().ref_count(1), 1);
    }
}

TEST(CacheManager, ForkFailsWithoutTakingAnything) {
    {
        MemoryRig rig(8, 4, /*running=*/1, 0, false, false);  // no slot for the child
        CacheManager& m = *rig.manager;
        Sequence* p = rig.make_seq(0, count_to(10));
        p->slot = m.acquire_slot();
        ASSERT_TRUE(m.ensure_blocks(*p, 10));
        p->num_computed = 10;
        rig.take_ops();
        Sequence* c = rig.make_sibling(*p, 1);
        EXPECT_FALSE(m.fork(*p, *c));
        EXPECT_EQ(c->slot, -1);
        EXPECT_TRUE(c->block_table.empty());
        EXPECT_EQ(m.pool().num_in_use(), 3);
        EXPECT_EQ(m.pool().ref_count(0), 1);
        EXPECT_TRUE(rig.ops.empty());
    }
    {
        MemoryRig rig(/*num_blocks=*/3, 4, 2, 0, false, false);  // a slot, but no page for the partial copy
        CacheManager& m = *rig.manager;
        Sequence* p = rig.make_seq(0, count_to(10));
        p->slot = m.acquire_slot();
        ASSERT_TRUE(m.ensure_blocks(*p, 10));  // all 3 pages
        p->num_computed = 10;
        rig.take_ops();
        Sequence* c = rig.make_sibling(*p, 1);
        EXPECT_FALSE(m.fork(*p, *c));
        EXPECT_EQ(c->slot, -1);
        EXPECT_TRUE(c->block_table.empty());
        EXPECT_EQ(m.num_slots_in_use(), 1);
        EXPECT_EQ(m.pool().ref_count(0), 1);
        EXPECT_TRUE(rig.ops.empty());
    }
}

}  // namespace
}  // namespace qs

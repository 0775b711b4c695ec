// The prefix cache under hash collisions forced by injected page-key functions: a hit is never
// taken on a hash alone, at any depth of the chain, so another prompt's K/V pages and GDN state
// are never served; and the page keys depend on the seed (fixed by --prefix-cache-seed, random
// otherwise) while hits within one manager still work. Pages of 4 tokens; each prompt computes
// up to its snapshot boundary (its last page boundary), as the scheduler's chunk cut does.
#include <gtest/gtest.h>

#include <algorithm>

#include "memory_test_util.h"

namespace qs {
namespace {

using test::MemoryRig;

// Every page gets the same key.
PageHash constant_hash(uint64_t, const PageHash&, const int32_t*, int64_t) { return PageHash{42, 42}; }
// The key of a page is its first token: it ignores the seed, the chain and the other tokens.
PageHash first_token_hash(uint64_t, const PageHash&, const int32_t* tokens, int64_t) {
    return PageHash{uint64_t(tokens[0]), 0};
}

// Admits `tokens` as a new sequence, takes any prefix hit, then computes the prompt up to its
// snapshot boundary (registering pages, taking the snapshot). Returns the tokens the hit reused.
int64_t run_prompt(MemoryRig& rig, int64_t id, const std::vector<int32_t>& tokens, Sequence** out = nullptr) {
    CacheManager& m = *rig.manager;
    Sequence* s = rig.make_seq(id, tokens);
    s->slot = m.acquire_slot();
    const int64_t hit = m.apply_prefix_hit(*s);
    const int64_t boundary = m.snapshot_boundary(*s);
    EXPECT_TRUE(m.ensure_blocks(*s, int64_t(tokens.size())));
    if (boundary > s->num_computed) {
        s->num_computed = boundary;
        m.after_forward(*s);
    }
    if (out) *out = s;
    return hit;
}

TEST(PrefixCacheCollision, AConstantHashNeverServesAnotherPrompt) {
    MemoryRig rig(16, 4, /*running=*/4, /*snapshots=*/4, false, true, constant_hash);
    Sequence* a = nullptr;
    EXPECT_EQ(run_prompt(rig, 0, {1, 2, 3, 4, 5, 6, 7, 8, 9}, &a), 0);
    ASSERT_EQ(rig.manager->pool().num_cached(), 1);  // every later page collides with page 0
    ASSERT_EQ(rig.manager->snapshots().size(), 0);   // page 1 was not registered: no snapshot
    // Same length, other tokens: every key equals a's, nothing may be reused.
    Sequence* b = nullptr;
    EXPECT_EQ(run_prompt(rig, 1, {11, 12, 13, 14, 15, 16, 17, 18, 19}, &b), 0);
    EXPECT_GT(rig.manager->pool().num_hash_mismatches(), 0);
    EXPECT_EQ(rig.manager->pool().ref_count(a->block_table[0]), 1);  // b took none of a's pages
    for (int32_t blk : b->block_table) EXPECT_EQ(std::count(a->block_table.begin(), a->block_table.end(), blk), 0);
    // With one-page prompts the first page is registered and snapshotted; a different prompt
    // with the same key still misses, the same prompt hits.
    MemoryRig one(16, 4, 4, 4, false, true, constant_hash);
    EXPECT_EQ(run_prompt(one, 0, {1, 2, 3, 4, 5}), 0);
    ASSERT_EQ(one.manager->snapshots().size(), 1);
    EXPECT_EQ(run_prompt(one, 1, {1, 2, 3, 9, 5}), 0);
    EXPECT_EQ(run_prompt(one, 2, {1, 2, 3, 4, 7}), 4);
}

// The deep case: a page whose own tokens match but whose prefix differs. x's first page collides
// with p's (same first token) and is refused; x's second page must then not be registered, or
// y (p's first page + x's second page) would get x's second page, computed after x's prefix.
TEST(PrefixCacheCollision, APageWithTheSameTokensAfterACollidingPrefixIsNotServed) {
    MemoryRig rig(16, 4, 4, 4, false, true, first_token_hash);
    Sequence *p = nullptr, *x = nullptr, *y = nullptr;
    EXPECT_EQ(run_prompt(rig, 0, {1, 2, 2, 2, 9}, &p), 0);               // page [1 2 2 2] + snapshot
    EXPECT_EQ(run_prompt(rig, 1, {1, 3, 3, 3, 5, 6, 7, 8, 9}, &x), 0);   // [1 3 3 3] collides
    EXPECT_EQ(x->prefix_pages.size(), 2u);
    EXPECT_EQ(x->prefix_pages[0].serial, 0u);
    EXPECT_EQ(x->prefix_pages[1].serial, 0u);  // not registered after an unregistered page
    EXPECT_EQ(rig.manager->pool().num_cached(), 1);
    // y = p's first page + x's second page: only p's first page (and its snapshot) may be reused.
    EXPECT_EQ(run_prompt(rig, 2, {1, 2, 2, 2, 5, 6, 7, 8, 9}, &y), 4);
    EXPECT_EQ(y->block_table[0], p->block_table[0]);
    EXPECT_NE(y->block_table[1], x->block_table[1]);
    // And without collisions the same sequence of prompts reuses what it should: y's second
    // page is computed, registered and snapshotted; z extends y and gets both pages.
    Sequence* z = nullptr;
    EXPECT_EQ(run_prompt(rig, 3, {1, 2, 2, 2, 5, 6, 7, 8, 4, 4}, &z), 8);
    EXPECT_EQ(z->block_table[1], y->block_table[1]);
}

TEST(PrefixCacheCollision, TheSeedChangesThePageKeys) {
    const std::vector<int32_t> prompt = {1, 2, 3, 4, 5, 6, 7, 8, 9};
    auto keys = [&](int64_t seed) {
        MemoryRig rig(16, 4, 4, 4, false, true);
        rig.config.prefix_cache_seed = seed;
        rig.manager = std::make_unique<CacheManager>(*rig.cache, rig.plan, rig.config);
        EXPECT_EQ(rig.manager->hasher().seed(), uint64_t(seed));
        Sequence* s = nullptr;
        run_prompt(rig, 0, prompt, &s);
        EXPECT_EQ(run_prompt(rig, 1, prompt), 8);  // hits work under any seed
        return s->prefix_pages;
    };
    const auto k1 = keys(1), k1again = keys(1), k2 = keys(2);
    ASSERT_EQ(k1.size(), 2u);
    EXPECT_EQ(k1[0].hash, k1again[0].hash);
    EXPECT_EQ(k1[1].hash, k1again[1].hash);
    EXPECT_NE(k1[0].hash, k2[0].hash);
    EXPECT_NE(k1[1].hash, k2[1].hash);
    // The default (-1) draws a seed per manager.
    MemoryRig r1(4, 4, 1, 0, false, true), r2(4, 4, 1, 0, false, true);
    ASSERT_EQ(r1.config.prefix_cache_seed, -1);
    EXPECT_NE(r1.manager->hasher().seed(), r2.manager->hasher().seed());
}

}  // namespace
}  // namespace qs

// The engine's memory pieces on their own: page ref counts and LRU reuse of cached pages, hits
// verified by tokens and predecessor, the seeded chained page key, snapshot LRU, and the
// stop-string checker's hold-back.
#include <gtest/gtest.h>

#include "engine/block_pool.h"
#include "engine/snapshot_cache.h"
#include "engine/stop_checker.h"

using namespace qs;

TEST(BlockPool, RefCountsAndCachedReuse) {
    BlockPool pool(3, 2);
    const int32_t ta[2] = {1, 2}, tb[2] = {3, 4};
    const PageHash ha{111, 1}, hb{222, 2};
    auto a = pool.allocate(), b = pool.allocate(), c = pool.allocate();
    ASSERT_TRUE(a && b && c);
    EXPECT_FALSE(pool.allocate().has_value());  // exhausted
    EXPECT_EQ(pool.num_in_use(), 3);
    pool.retain(*a);
    pool.release(*a);
    EXPECT_EQ(pool.ref_count(*a), 1);
    const uint64_t sa = pool.register_page(*a, ha, 0, ta);
    const uint64_t sb = pool.register_page(*b, hb, sa, tb);
    EXPECT_NE(sa, 0u);
    EXPECT_NE(sb, 0u);
    EXPECT_NE(sa, sb);
    pool.release(*a);  // cached, evictable
    pool.release(*b);
    EXPECT_EQ(pool.num_available(), 2);
    EXPECT_EQ(pool.num_in_use(), 1);
    // A hit takes the cached page back without eviction.
    auto hit = pool.find(hb, sa, tb);
    ASSERT_TRUE(hit);
    EXPECT_EQ(hit->block, *b);
    EXPECT_EQ(hit->serial, sb);
    pool.retain(hit->block);
    EXPECT_EQ(pool.num_available(), 1);
    // A fresh allocation evicts the least recently released cached page (a) and forgets it.
    auto fresh = pool.allocate();
    ASSERT_TRUE(fresh);
    EXPECT_EQ(*fresh, *a);
    EXPECT_FALSE(pool.find(ha, 0, ta).has_value());
    EXPECT_FALSE(pool.is_cached(*a, sa));
    EXPECT_TRUE(pool.is_cached(*b, sb));
    // Registered again, the same prefix gets a new serial: serials are never reused.
    const uint64_t sa2 = pool.register_page(*fresh, ha, 0, ta);
    EXPECT_GT(sa2, sb);
    pool.release(*fresh);
    pool.release(hit->block);
    pool.release(*c);
    EXPECT_EQ(pool.num_in_use(), 0);
    pool.clear_cache();
    EXPECT_EQ(pool.num_cached(), 0);
    EXPECT_EQ(pool.num_available(), 3);
}

// The hash only indexes: a lookup must bring the page's tokens and its predecessor's serial.
TEST(BlockPool, AHitNeedsTheTokensAndThePredecessor) {
    BlockPool pool(4, 3);
    const int32_t t[3] = {7, 8, 9}, other[3] = {7, 8, 10};
    const PageHash h{5, 5};
    auto a = pool.allocate();
    const uint64_t s = pool.register_page(*a, h, 0, t);
    ASSERT_NE(s, 0u);
    EXPECT_FALSE(pool.find(h, 0, other).has_value());  // same hash, other tokens
    EXPECT_FALSE(pool.find(h, s, t).has_value());      // same hash and tokens, other predecessor
    EXPECT_EQ(pool.num_hash_mismatches(), 2);
    ASSERT_TRUE(pool.find(h, 0, t).has_value());
    // Another page with the same hash: an equal one stands for the same prefix (the first
    // page's serial), a different one is not registered.
    auto b = pool.allocate(), c = pool.allocate();
    EXPECT_EQ(pool.register_page(*b, h, 0, t), s);
    EXPECT_EQ(pool.register_page(*c, h, 0, other), 0u);
    EXPECT_EQ(pool.num_cached(), 1);
    EXPECT_EQ(pool.num_hash_mismatches(), 3);
}

TEST(PageHash, ChainedSeededAndDependsOnEveryToken) {
    const int32_t x[4] = {1, 2, 3, 4}, y[4] = {1, 2, 3, 5};
    const PageHash root;
    EXPECT_NE(xxh3_page_hash(0, root, x, 4), xxh3_page_hash(0, root, y, 4));
    const PageHash px = xxh3_page_hash(0, root, x, 4), py = xxh3_page_hash(0, root, y, 4);
    EXPECT_NE(xxh3_page_hash(0, px, x, 4), xxh3_page_hash(0, py, x, 4));  // the chain
    EXPECT_EQ(xxh3_page_hash(7, px, x, 4), xxh3_page_hash(7, px, x, 4));  // a function
    // The seed changes every key, the first page's included; the 128 bits both depend on it.
    const PageHash s1 = xxh3_page_hash(1, root, x, 4), s2 = xxh3_page_hash(2, root, x, 4);
    EXPECT_NE(s1.lo, s2.lo);
    EXPECT_NE(s1.hi, s2.hi);
    EXPECT_NE(s1, xxh3_page_hash(0, root, x, 4));
    EXPECT_NE(random_page_hash_seed(), random_page_hash_seed());  // 2^-64 to fail by chance
}

TEST(SnapshotCache, LeastRecentlyUsedIsOverwritten) {
    SnapshotCache sc(10, 2);  // slots 10 and 11
    const PageHash h1{1, 0}, h2{2, 0}, h3{3, 0}, h5{5, 0};
    const int32_t p1[2] = {1, 1}, p2[2] = {2, 2}, p3[2] = {3, 3}, other[2] = {1, 9};
    auto s1 = sc.insert(h1, p1, 2), s2 = sc.insert(h2, p2, 2);
    ASSERT_TRUE(s1 && s2);
    EXPECT_NE(*s1, *s2);
    EXPECT_FALSE(sc.insert(h1, p1, 2).has_value());  // already present
    EXPECT_EQ(sc.lookup(h1, p1, 2), s1);             // 1 is now the most recent
    auto s3 = sc.insert(h3, p3, 2);                  // evicts 2
    EXPECT_EQ(s3, s2);
    EXPECT_FALSE(sc.contains(h2, p2, 2));
    EXPECT_TRUE(sc.contains(h1, p1, 2));
    // The snapshot is the state after one token prefix: another prefix (or a shorter one) under
    // the same hash misses, and inserting it takes the slot over.
    EXPECT_FALSE(sc.lookup(h1, other, 2).has_value());
    EXPECT_FALSE(sc.contains(h1, p1, 1));
    EXPECT_EQ(sc.insert(h1, other, 2), s1);
    EXPECT_FALSE(sc.contains(h1, p1, 2));
    EXPECT_TRUE(sc.contains(h1, other, 2));
    SnapshotCache none(0, 0);
    EXPECT_FALSE(none.insert(h5, p1, 2).has_value());
}

TEST(StopChecker, HoldsBackPossibleStartsAndCutsAtTheMatch) {
    StopChecker s({"END", "xy"}, false);
    EXPECT_EQ(s.add("abc E"), "abc ");  // "E" could start "END"
    EXPECT_EQ(s.add("N"), "");          // "EN" still could
    EXPECT_EQ(s.add("D tail"), "");     // match: output ends right before it
    EXPECT_TRUE(s.stopped());
    EXPECT_EQ(s.matched(), "END");
    EXPECT_EQ(s.add("more"), "");

    StopChecker t({"END"}, true);
    EXPECT_EQ(t.add("aEb"), "aEb");  // "Eb" is no prefix of END
    EXPECT_EQ(t.add("cEND!"), "cEND");
    StopChecker u({"abc"}, false);
    EXPECT_EQ(u.add("xxab"), "xx");
    EXPECT_EQ(u.flush(), "ab");  // generation ended for another reason
    StopChecker none({}, false);
    EXPECT_EQ(none.add("anything"), "anything");
}

TEST(StopChecker, EarliestMatchWins) {
    StopChecker s({"cd", "bcd"}, false);
    EXPECT_EQ(s.add("abcde"), "a");
    EXPECT_EQ(s.matched(), "bcd");
}

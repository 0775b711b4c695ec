// The engine's memory pieces on their own: page ref counts and LRU reuse of cached pages,
// snapshot LRU, and the stop-string checker's hold-back.
#include <gtest/gtest.h>

#include "engine/block_pool.h"
#include "engine/snapshot_cache.h"
#include "engine/stop_checker.h"

using namespace qs;

TEST(BlockPool, RefCountsAndCachedReuse) {
    BlockPool pool(3);
    auto a = pool.allocate(), b = pool.allocate(), c = pool.allocate();
    ASSERT_TRUE(a && b && c);
    EXPECT_FALSE(pool.allocate().has_value());  // exhausted
    EXPECT_EQ(pool.num_in_use(), 3);
    pool.retain(*a);
    pool.release(*a);
    EXPECT_EQ(pool.ref_count(*a), 1);
    pool.register_hash(*a, 111);
    pool.register_hash(*b, 222);
    pool.release(*a);  // cached, evictable
    pool.release(*b);
    EXPECT_EQ(pool.num_available(), 2);
    EXPECT_EQ(pool.num_in_use(), 1);
    // A hit takes the cached page back without eviction.
    auto hit = pool.acquire_cached(222);
    ASSERT_TRUE(hit);
    EXPECT_EQ(*hit, *b);
    EXPECT_EQ(pool.num_available(), 1);
    // A fresh allocation evicts the least recently released cached page (a) and forgets its hash.
    auto fresh = pool.allocate();
    ASSERT_TRUE(fresh);
    EXPECT_EQ(*fresh, *a);
    EXPECT_FALSE(pool.contains(111));
    EXPECT_TRUE(pool.contains(222));
    pool.release(*fresh);
    pool.release(*hit);
    pool.release(*c);
    EXPECT_EQ(pool.num_in_use(), 0);
    pool.clear_cache();
    EXPECT_EQ(pool.num_cached(), 0);
    EXPECT_EQ(pool.num_available(), 3);
}

TEST(BlockPool, ChainHashDependsOnPrefix) {
    const int32_t x[4] = {1, 2, 3, 4}, y[4] = {1, 2, 3, 5};
    EXPECT_NE(chain_block_hash(0, x, 4), chain_block_hash(0, y, 4));
    EXPECT_NE(chain_block_hash(7, x, 4), chain_block_hash(8, x, 4));
    EXPECT_EQ(chain_block_hash(7, x, 4), chain_block_hash(7, x, 4));
}

TEST(SnapshotCache, LeastRecentlyUsedIsOverwritten) {
    SnapshotCache sc(10, 2);  // slots 10 and 11
    auto s1 = sc.insert(1), s2 = sc.insert(2);
    ASSERT_TRUE(s1 && s2);
    EXPECT_NE(*s1, *s2);
    EXPECT_FALSE(sc.insert(1).has_value());  // already present
    EXPECT_EQ(sc.lookup(1), s1);             // 1 is now the most recent
    auto s3 = sc.insert(3);                  // evicts 2
    EXPECT_EQ(s3, s2);
    EXPECT_FALSE(sc.contains(2));
    EXPECT_TRUE(sc.contains(1));
    SnapshotCache none(0, 0);
    EXPECT_FALSE(none.insert(5).has_value());
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

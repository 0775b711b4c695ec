// SnapshotCache (see snapshot_cache.h).
#include "engine/snapshot_cache.h"

#include <algorithm>

namespace qs {

namespace {

bool same_prefix(const std::vector<int32_t>& stored, const int32_t* prefix, int64_t n) {
    return int64_t(stored.size()) == n && std::equal(stored.begin(), stored.end(), prefix);
}

}  // namespace

SnapshotCache::SnapshotCache(int64_t first_slot, int64_t num_slots) {
    for (int64_t i = 0; i < num_slots; ++i) slots_.push_back(first_slot + i);
    free_ = slots_;
}

bool SnapshotCache::contains(const PageHash& hash, const int32_t* prefix, int64_t n) const {
    auto it = by_hash_.find(hash);
    return it != by_hash_.end() && same_prefix(it->second.prefix, prefix, n);
}

std::optional<int64_t> SnapshotCache::lookup(const PageHash& hash, const int32_t* prefix, int64_t n) {
    auto it = by_hash_.find(hash);
    if (it == by_hash_.end() || !same_prefix(it->second.prefix, prefix, n)) return std::nullopt;
    lru_.splice(lru_.end(), lru_, it->second.pos);
    return it->second.slot;
}

std::optional<int64_t> SnapshotCache::insert(const PageHash& hash, const int32_t* prefix, int64_t n) {
    if (slots_.empty()) return std::nullopt;
    if (auto it = by_hash_.find(hash); it != by_hash_.end()) {
        if (same_prefix(it->second.prefix, prefix, n)) return std::nullopt;
        // Another prefix under the same hash (a collision): the newer one takes the slot.
        it->second.prefix.assign(prefix, prefix + n);
        lru_.splice(lru_.end(), lru_, it->second.pos);
        return it->second.slot;
    }
    int64_t slot;
    if (!free_.empty()) {
        slot = free_.back();
        free_.pop_back();
    } else {
        const PageHash victim = lru_.front();
        lru_.pop_front();
        slot = by_hash_[victim].slot;
        by_hash_.erase(victim);
    }
    lru_.push_back(hash);
    by_hash_[hash] = {slot, std::vector<int32_t>(prefix, prefix + n), std::prev(lru_.end())};
    return slot;
}

void SnapshotCache::clear() {
    by_hash_.clear();
    lru_.clear();
    free_ = slots_;
}

}  // namespace qs

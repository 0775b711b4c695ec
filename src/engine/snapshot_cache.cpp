// SnapshotCache (see snapshot_cache.h).
#include "engine/snapshot_cache.h"

namespace qs {

SnapshotCache::SnapshotCache(int64_t first_slot, int64_t num_slots) {
    for (int64_t i = 0; i < num_slots; ++i) slots_.push_back(first_slot + i);
    free_ = slots_;
}

std::optional<int64_t> SnapshotCache::lookup(uint64_t hash) {
    auto it = by_hash_.find(hash);
    if (it == by_hash_.end()) return std::nullopt;
    lru_.splice(lru_.end(), lru_, it->second.pos);
    return it->second.slot;
}

std::optional<int64_t> SnapshotCache::insert(uint64_t hash) {
    if (slots_.empty() || by_hash_.count(hash)) return std::nullopt;
    int64_t slot;
    if (!free_.empty()) {
        slot = free_.back();
        free_.pop_back();
    } else {
        const uint64_t victim = lru_.front();
        lru_.pop_front();
        slot = by_hash_[victim].slot;
        by_hash_.erase(victim);
    }
    lru_.push_back(hash);
    by_hash_[hash] = {slot, std::prev(lru_.end())};
    return slot;
}

void SnapshotCache::clear() {
    by_hash_.clear();
    lru_.clear();
    free_ = slots_;
}

}  // namespace qs

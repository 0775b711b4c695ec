// SnapshotCache: GDN state snapshots (conv window + recurrent state of every GDN layer) for the
// prefix cache, keyed by the prefix hash of the page that ends at the snapshot's position. A hit
// restores a sequence's state instead of recomputing its prompt. Snapshots live in dedicated state
// slots of the ModelCache; the least recently used one is overwritten when all are taken.
// Owned by the engine thread.
#pragma once

#include <cstdint>
#include <list>
#include <optional>
#include <unordered_map>
#include <vector>

namespace qs {

class SnapshotCache {
public:
    // Slots [first_slot, first_slot + num_slots) of the ModelCache are reserved for snapshots.
    SnapshotCache(int64_t first_slot, int64_t num_slots);

    int64_t capacity() const { return int64_t(slots_.size()); }
    int64_t size() const { return int64_t(by_hash_.size()); }
    bool contains(uint64_t hash) const { return by_hash_.count(hash) != 0; }
    // The slot holding the snapshot for `hash` (marks it recently used).
    std::optional<int64_t> lookup(uint64_t hash);
    // A slot to write the snapshot for `hash` into (a free one, or the least recently used);
    // nullopt when there are no snapshot slots or `hash` is already present.
    std::optional<int64_t> insert(uint64_t hash);
    void clear();

private:
    std::vector<int64_t> slots_;
    std::vector<int64_t> free_;
    std::list<uint64_t> lru_;  // front = least recently used
    struct Entry {
        int64_t slot;
        std::list<uint64_t>::iterator pos;
    };
    std::unordered_map<uint64_t, Entry> by_hash_;
};

}  // namespace qs

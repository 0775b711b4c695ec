// SnapshotCache: GDN state snapshots (conv window + recurrent state of every GDN layer) for the
// prefix cache, keyed by the PageHash of the page that ends at the snapshot's position. A state
// depends on every token before it, so each snapshot keeps that token prefix and a lookup must
// bring an equal one: a hash collision can never restore another prompt's state. (The prefix, not
// the page's BlockPool serial, is the identity: the snapshot stays valid when its pages are
// evicted and the same prefix is registered again.) A hit restores a sequence's state instead of
// recomputing its prompt. Snapshots live in dedicated state slots of the ModelCache; the least
// recently used one is overwritten when all are taken. Owned by the engine thread.
#pragma once

#include <cstdint>
#include <list>
#include <optional>
#include <unordered_map>
#include <vector>

#include "engine/page_hash.h"

namespace qs {

class SnapshotCache {
public:
    // Slots [first_slot, first_slot + num_slots) of the ModelCache are reserved for snapshots.
    SnapshotCache(int64_t first_slot, int64_t num_slots);

    int64_t capacity() const { return int64_t(slots_.size()); }
    int64_t size() const { return int64_t(by_hash_.size()); }
    // Whether the snapshot under `hash` is the state after exactly `prefix` [n].
    bool contains(const PageHash& hash, const int32_t* prefix, int64_t n) const;
    // Its slot (marks it recently used), or nullopt.
    std::optional<int64_t> lookup(const PageHash& hash, const int32_t* prefix, int64_t n);
    // A slot to write the state after `prefix` [n] into (a free one, the least recently used
    // one, or the one a different prefix held under the same hash); nullopt when there are no
    // snapshot slots or this very snapshot is present.
    std::optional<int64_t> insert(const PageHash& hash, const int32_t* prefix, int64_t n);
    void clear();

private:
    std::vector<int64_t> slots_;
    std::vector<int64_t> free_;
    std::list<PageHash> lru_;  // front = least recently used
    struct Entry {
        int64_t slot;
        std::vector<int32_t> prefix;  // the tokens the state has seen
        std::list<PageHash>::iterator pos;
    };
    std::unordered_map<PageHash, Entry, PageHashHasher> by_hash_;
};

}  // namespace qs

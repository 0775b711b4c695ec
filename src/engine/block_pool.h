// BlockPool: the KV pages of the full-attention layers. Reference-counted so sequences can share
// full pages of a common prefix; a page whose count drops to zero keeps its contents while it is
// registered in the prefix cache and is reused by a later hit, or evicted in LRU order when a
// fresh page is needed. Owned by the engine thread.
//
// Prefix cache: a registered page keeps its tokens and the serial of the registered page before
// it (0 for a first page), and gets a serial of its own, never reused. A lookup by PageHash
// succeeds only when the stored tokens and predecessor serial equal the caller's, so a registered
// page stands for exactly one full token prefix (its tokens after its predecessor's prefix),
// whatever the hash function does: a collision is a miss (counted), never another prompt's KV.
#pragma once

#include <cstdint>
#include <list>
#include <optional>
#include <unordered_map>
#include <vector>

#include "engine/page_hash.h"

namespace qs {

// What a sequence knows of one of its full pages: its key, and the serial of the registered page
// that holds its prefix (0: none, e.g. its hash collided; later pages are then not registered).
struct PrefixPage {
    PageHash hash;
    uint64_t serial = 0;
    bool operator==(const PrefixPage&) const = default;
};

// A registered page found by a lookup.
struct CachedPage {
    int32_t block = -1;
    uint64_t serial = 0;
};

class BlockPool {
public:
    BlockPool(int64_t num_blocks, int64_t block_size);

    int64_t num_blocks() const { return int64_t(ref_.size()); }
    int64_t block_size() const { return block_size_; }
    // Pages that allocate() can hand out: free ones plus cached ones with no owner.
    int64_t num_available() const { return int64_t(free_.size() + evictable_.size()); }
    // Pages owned by at least one sequence.
    int64_t num_in_use() const { return num_blocks() - num_available(); }
    int64_t num_cached() const { return int64_t(hash_to_block_.size()); }
    // Lookups whose hash matched a page with other tokens or another predecessor.
    int64_t num_hash_mismatches() const { return num_hash_mismatches_; }

    // A page with count 1; evicts the least recently released cached page when no free one is left.
    std::optional<int32_t> allocate();
    void retain(int32_t block);
    void release(int32_t block);
    int32_t ref_count(int32_t block) const { return ref_[size_t(block)]; }

    // Registers the full page `block` (owned by the caller) under `hash`, with its tokens
    // [block_size] and the serial of the registered page holding the prefix before it (0: it is
    // a first page). Returns the serial that now stands for this prefix: the page's new serial,
    // or that of an equal page already registered under `hash` (same tokens and predecessor);
    // 0 when `hash` belongs to a different page (a collision) and nothing was registered.
    uint64_t register_page(int32_t block, const PageHash& hash, uint64_t parent, const int32_t* tokens);
    // The registered page under `hash` with these tokens [block_size] and predecessor, or
    // nullopt. Not retained: retain() the ones you take.
    std::optional<CachedPage> find(const PageHash& hash, uint64_t parent, const int32_t* tokens);
    // Whether a registered page with this serial is still cached.
    bool is_cached(int32_t block, uint64_t serial) const {
        return has_hash_[size_t(block)] && serial_[size_t(block)] == serial;
    }
    // Drops every cached page (pages with no owner become free).
    void clear_cache();

private:
    void unregister(int32_t block);
    bool same_page(int32_t block, uint64_t parent, const int32_t* tokens) const;

    int64_t block_size_;
    std::vector<int32_t> ref_;
    std::vector<int32_t> free_;          // count 0, not cached
    std::list<int32_t> evictable_;       // count 0, cached; front = least recently released
    std::vector<std::list<int32_t>::iterator> evictable_pos_;
    std::vector<uint8_t> in_evictable_;
    // Per page, while registered:
    std::vector<uint8_t> has_hash_;
    std::vector<PageHash> block_hash_;
    std::vector<uint64_t> serial_;
    std::vector<uint64_t> parent_;
    std::vector<int32_t> tokens_;        // [num_blocks, block_size]
    std::unordered_map<PageHash, int32_t, PageHashHasher> hash_to_block_;
    uint64_t next_serial_ = 1;
    int64_t num_hash_mismatches_ = 0;
};

}  // namespace qs

// BlockPool: the KV pages of the full-attention layers. Reference-counted so sequences can share
// full pages of a common prefix; a page whose count drops to zero keeps its contents while it is
// registered under a prefix hash (prefix cache) and is reused by a later hit, or evicted in LRU
// order when a fresh page is needed. Owned by the engine thread.
#pragma once

#include <cstdint>
#include <list>
#include <optional>
#include <unordered_map>
#include <vector>

namespace qs {

class BlockPool {
public:
    explicit BlockPool(int64_t num_blocks);

    int64_t num_blocks() const { return int64_t(ref_.size()); }
    // Pages that allocate() can hand out: free ones plus cached ones with no owner.
    int64_t num_available() const { return int64_t(free_.size() + evictable_.size()); }
    // Pages owned by at least one sequence.
    int64_t num_in_use() const { return num_blocks() - num_available(); }
    int64_t num_cached() const { return int64_t(hash_to_block_.size()); }

    // A page with count 1; evicts the least recently released cached page when no free one is left.
    std::optional<int32_t> allocate();
    void retain(int32_t block);
    void release(int32_t block);
    int32_t ref_count(int32_t block) const { return ref_[size_t(block)]; }

    // Prefix cache: registers a full page under the hash of its token prefix (first one wins).
    void register_hash(int32_t block, uint64_t hash);
    // The page cached under `hash`, retained for the caller; nullopt on a miss.
    std::optional<int32_t> acquire_cached(uint64_t hash);
    bool contains(uint64_t hash) const { return hash_to_block_.count(hash) != 0; }
    // Drops every cached hash (pages with no owner become free).
    void clear_cache();

private:
    void unregister(int32_t block);

    std::vector<int32_t> ref_;
    std::vector<int32_t> free_;          // count 0, not cached
    std::list<int32_t> evictable_;       // count 0, cached; front = least recently released
    std::vector<std::list<int32_t>::iterator> evictable_pos_;
    std::vector<uint8_t> in_evictable_;
    std::vector<uint64_t> block_hash_;
    std::vector<uint8_t> has_hash_;
    std::unordered_map<uint64_t, int32_t> hash_to_block_;
};

// Hash of a page's tokens chained on the previous page's hash (0 for the first page).
uint64_t chain_block_hash(uint64_t prev, const int32_t* tokens, int64_t n);

}  // namespace qs

// CacheManager: the memory a running sequence owns, in one place. KV pages (BlockPool, with the
// prefix cache), GDN state slots (running slots, snapshot slots) and the copies between them:
// prefix hits restore a snapshot, forks share pages and copy state. (MTP needs no slot of its
// own: verification defers the GDN state and commits the accepted rows, Qwen36Model; in
// spare-slot mode a verify step borrows a spare slot per verified sequence from a small pool,
// and a full acceptance swaps it with the sequence's slot.) A prefix
// hit is verified page by page (tokens and predecessor, BlockPool), never taken on a hash alone.
// Owned by the engine thread.
#pragma once

#include <cstdint>
#include <vector>

#include "backend/model_cache.h"
#include "engine/block_pool.h"
#include "engine/engine_config.h"
#include "engine/sequence.h"
#include "engine/snapshot_cache.h"

namespace qs {

class CacheManager {
public:
    // The page keys are seeded with config.prefix_cache_seed, or a random seed when it is -1.
    // `hash_fn` replaces XXH3 in tests (forced collisions).
    CacheManager(ModelCache& cache, const CapacityPlan& plan, const EngineConfig& config,
                 PageHashFn hash_fn = xxh3_page_hash);

    int64_t block_size() const { return block_size_; }
    bool prefix_caching() const { return prefix_caching_; }

    // Running slots.
    bool has_free_slot() const { return !free_slots_.empty(); }
    int32_t acquire_slot();  // zeroes the slot's state
    int64_t num_slots_in_use() const { return num_running_slots_ - int64_t(free_slots_.size()); }
    int64_t num_running_slots() const { return num_running_slots_; }

    // MTP spare slots (CapacityPlan::num_spare_slots), borrowed for one verify step: -1 when
    // none is free. The verify writes the state after every draft there; then either
    // take_spare (every draft accepted: the spare becomes the sequence's slot and its old slot
    // a spare) or return_spare (the sequence's slot stays). Never zeroed: the verify writes all of it.
    int32_t borrow_spare();
    void take_spare(Sequence& s, int32_t spare);
    void return_spare(int32_t spare);
    int64_t num_free_spares() const { return int64_t(free_spares_.size()); }

    // Pages so that positions [0, num_positions) are backed; false (allocating nothing) if the
    // pool cannot supply them.
    bool ensure_blocks(Sequence& s, int64_t num_positions);
    // Gives back the sequence's pages and slot; its KV/state are gone (num_computed = 0).
    void free_sequence(Sequence& s);

    // On admission: reuses the longest cached page prefix that ends at a stored GDN snapshot
    // (pages retained, state restored, num_computed advanced). Returns the tokens reused.
    int64_t apply_prefix_hit(Sequence& s);
    // The position where a snapshot is worth taking for this sequence (the last page boundary
    // before its final prompt token), or -1.
    int64_t snapshot_boundary(const Sequence& s) const;
    // After a forward: registers pages that became full and snapshots the state at the boundary.
    void after_forward(Sequence& s);
    // Makes `child` a copy of `parent` (same tokens computed): full pages shared, the partial
    // page copied (with MTP, the page of the last computed position even when full), state
    // copied. Needs a slot and possibly one page; false if unavailable.
    bool fork(const Sequence& parent, Sequence& child);

    BlockPool& pool() { return pool_; }
    const BlockPool& pool() const { return pool_; }
    const SnapshotCache& snapshots() const { return snapshots_; }
    const PageHasher& hasher() const { return hasher_; }
    void clear_prefix_cache();

private:
    // The first n tokens the prefix cache keys s by: s.tokens, with the prompt's image pads
    // replaced by their pixel keys (RequestState::cache_key) when it has images. Valid until the
    // next call.
    const int32_t* key_tokens(const Sequence& s, int64_t n);

    ModelCache& cache_;
    BlockPool pool_;
    PageHasher hasher_;
    SnapshotCache snapshots_;
    int64_t block_size_;
    bool prefix_caching_;
    int64_t num_running_slots_;
    bool mtp_;  // MTP on: the page of the last computed position holds sequence-private MTP K/V
    std::vector<int32_t> free_slots_;
    std::vector<int32_t> free_spares_;
    std::vector<int32_t> key_buf_;  // key_tokens' result for a sequence with images
};

}  // namespace qs

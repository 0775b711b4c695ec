// Pieces for driving CacheManager and Scheduler without an Engine: a ModelCache that stores
// nothing but records every slot/page copy (the external CacheStorage hook, as the CUDA cache
// uses it), a hand-written CapacityPlan and EngineConfig, and sequences made directly.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "backend/model_cache.h"
#include "engine/cache_manager.h"
#include "engine/engine_config.h"
#include "engine/scheduler.h"
#include "engine/sequence.h"

namespace qs::test {

// One call the CacheManager made on the cache's storage.
struct CacheOp {
    enum Kind { kResetSlot, kCopySlot, kCopyBlock } kind;
    int64_t from;  // kResetSlot: the slot; kCopy*: the source
    int64_t to;    // kResetSlot: -1
    bool operator==(const CacheOp& o) const { return kind == o.kind && from == o.from && to == o.to; }
};

class RecordingStorage final : public CacheStorage {
public:
    explicit RecordingStorage(std::vector<CacheOp>* log) : log_(log) {}
    void reset_slot(int64_t slot) override { log_->push_back({CacheOp::kResetSlot, slot, -1}); }
    void copy_slot(int64_t from, int64_t to) override { log_->push_back({CacheOp::kCopySlot, from, to}); }
    void copy_block(int64_t from, int64_t to) override { log_->push_back({CacheOp::kCopyBlock, from, to}); }

private:
    std::vector<CacheOp>* log_;
};

// The memory of a small engine: `num_blocks` pages of `block_size` tokens; `running` running
// slots, then `snapshots` snapshot slots; `mtp`: MTP on (one proposal); `hash_fn`: the page key
// function (tests force collisions with weak ones).
struct MemoryRig {
    EngineConfig config;
    CapacityPlan plan;
    std::vector<CacheOp> ops;  // what the manager asked of the storage, in order
    std::unique_ptr<ModelCache> cache;
    std::unique_ptr<CacheManager> manager;
    std::vector<std::unique_ptr<RequestState>> requests;  // own the sequences

    MemoryRig(int64_t num_blocks, int64_t block_size, int64_t running, int64_t snapshots, bool mtp,
              bool prefix_caching, PageHashFn hash_fn = xxh3_page_hash, int64_t spares = 0) {
        config.kv_block_size = block_size;
        config.max_num_seqs = running;
        config.enable_prefix_caching = prefix_caching;
        config.num_speculative_tokens = mtp ? 1 : 0;
        plan.num_kv_blocks = num_blocks;
        plan.num_running_slots = running;
        plan.num_snapshot_slots = snapshots;
        plan.num_spare_slots = spares;
        CacheGeometry g;  // only the ids matter: no storage, so the layer shapes stay zero
        g.block_size = block_size;
        g.num_blocks = num_blocks;
        g.num_state_slots = plan.total_state_slots();
        cache = std::make_unique<ModelCache>(g, std::make_unique<RecordingStorage>(&ops));
        manager = std::make_unique<CacheManager>(*cache, plan, config, hash_fn);
    }

    // A waiting sequence of a new request: `id` is its arrival order, `tokens` its prompt.
    Sequence* make_seq(int64_t id, std::vector<int32_t> tokens, int32_t priority = 0) {
        auto r = std::make_unique<RequestState>();
        r->request.id = "r" + std::to_string(id);
        r->request.priority = priority;
        r->request.prompt_ids = tokens;
        auto s = std::make_unique<Sequence>();
        s->id = id;
        s->request = r.get();
        s->num_prompt = int64_t(tokens.size());
        s->tokens = std::move(tokens);
        Sequence* out = s.get();
        r->seqs.push_back(std::move(s));
        requests.push_back(std::move(r));
        return out;
    }
    // A second completion of `parent`'s request (not yet holding anything), as n > 1 makes.
    Sequence* make_sibling(const Sequence& parent, int64_t id) {
        auto s = std::make_unique<Sequence>();
        s->id = id;
        s->request = parent.request;
        s->index = int32_t(parent.request->seqs.size());
        s->tokens = parent.tokens;
        s->num_prompt = parent.num_prompt;
        Sequence* out = s.get();
        parent.request->seqs.push_back(std::move(s));
        return out;
    }
    std::vector<CacheOp> take_ops() { return std::exchange(ops, {}); }
};

// Tokens 1..n (distinct, so page hashes differ page to page).
inline std::vector<int32_t> count_to(int32_t n) {
    std::vector<int32_t> t;
    for (int32_t i = 1; i <= n; ++i) t.push_back(i);
    return t;
}

}  // namespace qs::test

// CacheManager (see cache_manager.h).
#include "engine/cache_manager.h"

#include <algorithm>

#include "core/check.h"

namespace qs {

CacheManager::CacheManager(ModelCache& cache, const CapacityPlan& plan, const EngineConfig& config,
                           PageHashFn hash_fn)
    : cache_(cache),
      pool_(plan.num_kv_blocks, config.kv_block_size),
      hasher_(config.prefix_cache_seed >= 0 ? uint64_t(config.prefix_cache_seed) : random_page_hash_seed(), hash_fn),
      snapshots_(plan.num_running_slots, plan.num_snapshot_slots),
      block_size_(config.kv_block_size),
      prefix_caching_(config.enable_prefix_caching),
      num_running_slots_(plan.num_running_slots),
      mtp_(config.num_speculative_tokens > 0) {
    QS_CHECK(cache.geometry().num_state_slots >= plan.total_state_slots());
    for (int64_t s = num_running_slots_ - 1; s >= 0; --s) free_slots_.push_back(int32_t(s));
    const int64_t first_spare = plan.num_running_slots + plan.num_snapshot_slots;
    for (int64_t s = first_spare + plan.num_spare_slots - 1; s >= first_spare; --s) free_spares_.push_back(int32_t(s));
}

int32_t CacheManager::borrow_spare() {
    if (free_spares_.empty()) return -1;
    const int32_t s = free_spares_.back();
    free_spares_.pop_back();
    return s;
}

void CacheManager::take_spare(Sequence& s, int32_t spare) {
    QS_CHECK(spare >= 0 && s.slot >= 0 && spare != s.slot);
    free_spares_.push_back(s.slot);
    s.slot = spare;
}

void CacheManager::return_spare(int32_t spare) {
    QS_CHECK(spare >= 0);
    free_spares_.push_back(spare);
}

int32_t CacheManager::acquire_slot() {
    QS_CHECK(!free_slots_.empty());
    const int32_t s = free_slots_.back();
    free_slots_.pop_back();
    cache_.reset_slot(s);
    return s;
}

bool CacheManager::ensure_blocks(Sequence& s, int64_t num_positions) {
    const int64_t need = (num_positions + block_size_ - 1) / block_size_ - int64_t(s.block_table.size());
    if (need <= 0) return true;
    if (pool_.num_available() < need) return false;
    for (int64_t i = 0; i < need; ++i) s.block_table.push_back(*pool_.allocate());
    return true;
}

void CacheManager::free_sequence(Sequence& s) {
    for (int32_t b : s.block_table) pool_.release(b);
    s.block_table.clear();
    s.prefix_pages.clear();
    if (s.slot >= 0) free_slots_.push_back(s.slot);
    s.slot = -1;
    s.num_computed = 0;
    s.draft.clear();
}

int64_t CacheManager::snapshot_boundary(const Sequence& s) const {
    if (!prefix_caching_ || snapshots_.capacity() == 0) return -1;
    // The prompt's last page boundary: the state there serves every request that extends this
    // prompt (a shared system prompt, the next turn of a conversation). Decode positions are not
    // snapshotted: that would copy the whole state every page and evict the useful snapshots.
    const int64_t b = (s.num_prompt - 1) / block_size_ * block_size_;
    return b > 0 ? b : -1;
}

const int32_t* CacheManager::key_tokens(const Sequence& s, int64_t n) {
    if (s.request == nullptr || s.request->cache_key.empty()) return s.tokens.data();
    // The prompt's image pads become their pixel keys; the rest are the tokens.
    const std::vector<int32_t>& key = s.request->cache_key;
    key_buf_.assign(s.tokens.begin(), s.tokens.begin() + n);
    std::copy(key.begin(), key.begin() + std::min<int64_t>(n, int64_t(key.size())), key_buf_.begin());
    return key_buf_.data();
}

int64_t CacheManager::apply_prefix_hit(Sequence& s) {
    QS_CHECK(s.num_computed == 0 && s.block_table.empty() && s.slot >= 0);
    if (!prefix_caching_) return 0;
    // Pages wholly before the last known token (that one must be computed to get logits).
    const int64_t max_pages = (int64_t(s.tokens.size()) - 1) / block_size_;
    const int32_t* key = key_tokens(s, max_pages * block_size_);
    std::vector<CachedPage> found;
    std::vector<PrefixPage> pages;
    PageHash h;
    uint64_t parent = 0;
    for (int64_t i = 0; i < max_pages; ++i) {
        const int32_t* tokens = key + i * block_size_;
        h = hasher_(h, tokens, block_size_);
        const std::optional<CachedPage> c = pool_.find(h, parent, tokens);
        if (!c) break;
        found.push_back(*c);
        pages.push_back({h, c->serial});
        parent = c->serial;
    }
    int64_t m = int64_t(pages.size());
    while (m > 0 && !snapshots_.contains(pages[size_t(m - 1)].hash, key, m * block_size_)) --m;
    if (m == 0) return 0;
    for (int64_t i = 0; i < m; ++i) {
        pool_.retain(found[size_t(i)].block);
        s.block_table.push_back(found[size_t(i)].block);
        s.prefix_pages.push_back(pages[size_t(i)]);
    }
    cache_.copy_slot(*snapshots_.lookup(pages[size_t(m - 1)].hash, key, m * block_size_), s.slot);
    s.num_computed = m * block_size_;
    return s.num_computed;
}

void CacheManager::after_forward(Sequence& s) {
    if (!prefix_caching_) return;
    const int64_t full = s.num_computed / block_size_;
    const int32_t* key = key_tokens(s, s.num_computed);
    for (int64_t i = int64_t(s.prefix_pages.size()); i < full; ++i) {
        const int32_t* tokens = key + i * block_size_;
        const PrefixPage* prev = i ? &s.prefix_pages[size_t(i - 1)] : nullptr;
        PrefixPage page;
        page.hash = hasher_(prev ? prev->hash : PageHash{}, tokens, block_size_);
        // A page is registered after its predecessor only: the predecessor's serial names the
        // prefix the page's K/V was computed from.
        if (!prev || prev->serial != 0)
            page.serial = pool_.register_page(s.block_table[size_t(i)], page.hash, prev ? prev->serial : 0, tokens);
        s.prefix_pages.push_back(page);
    }
    if (s.num_computed == snapshot_boundary(s) && full > 0) {
        const PrefixPage& page = s.prefix_pages[size_t(full - 1)];
        if (page.serial != 0)  // else no lookup could reach it
            if (auto slot = snapshots_.insert(page.hash, key, s.num_computed))
                cache_.copy_slot(s.slot, *slot);
    }
}

bool CacheManager::fork(const Sequence& parent, Sequence& child) {
    QS_CHECK(child.block_table.empty() && child.slot < 0);
    int64_t shared = parent.num_computed / block_size_;
    const bool partial = parent.num_computed % block_size_ != 0;
    // With MTP the page holding the last computed position is private even when full: the MTP
    // KV at that position is computed from the sequence's own next token, which differs.
    const bool copy_last = partial || (mtp_ && shared > 0);
    if (!partial && copy_last) --shared;
    if (free_slots_.empty() || (copy_last && pool_.num_available() < 1)) return false;
    child.slot = free_slots_.back();
    free_slots_.pop_back();
    cache_.copy_slot(parent.slot, child.slot);
    for (int64_t i = 0; i < shared; ++i) {
        pool_.retain(parent.block_table[size_t(i)]);
        child.block_table.push_back(parent.block_table[size_t(i)]);
    }
    if (copy_last) {
        const int32_t b = *pool_.allocate();
        cache_.copy_block(parent.block_table[size_t(shared)], b);
        child.block_table.push_back(b);
    }
    child.prefix_pages = parent.prefix_pages;
    child.num_computed = parent.num_computed;
    return true;
}

void CacheManager::clear_prefix_cache() {
    pool_.clear_cache();
    snapshots_.clear();
}

}  // namespace qs

// BlockPool (see block_pool.h).
#include "engine/block_pool.h"

#include "core/check.h"

namespace qs {

BlockPool::BlockPool(int64_t num_blocks)
    : ref_(size_t(num_blocks), 0),
      evictable_pos_(size_t(num_blocks)),
      in_evictable_(size_t(num_blocks), 0),
      block_hash_(size_t(num_blocks), 0),
      has_hash_(size_t(num_blocks), 0) {
    free_.reserve(size_t(num_blocks));
    for (int64_t b = num_blocks - 1; b >= 0; --b) free_.push_back(int32_t(b));  // hand out low ids first
}

std::optional<int32_t> BlockPool::allocate() {
    int32_t b;
    if (!free_.empty()) {
        b = free_.back();
        free_.pop_back();
    } else if (!evictable_.empty()) {
        b = evictable_.front();
        evictable_.pop_front();
        in_evictable_[size_t(b)] = 0;
        unregister(b);
    } else {
        return std::nullopt;
    }
    QS_CHECK(ref_[size_t(b)] == 0);
    ref_[size_t(b)] = 1;
    return b;
}

void BlockPool::retain(int32_t b) {
    if (ref_[size_t(b)] == 0 && in_evictable_[size_t(b)]) {
        evictable_.erase(evictable_pos_[size_t(b)]);
        in_evictable_[size_t(b)] = 0;
    }
    ++ref_[size_t(b)];
}

void BlockPool::release(int32_t b) {
    QS_CHECK_MSG(ref_[size_t(b)] > 0, "BlockPool: release of a free page");
    if (--ref_[size_t(b)] > 0) return;
    if (has_hash_[size_t(b)]) {
        evictable_.push_back(b);
        evictable_pos_[size_t(b)] = std::prev(evictable_.end());
        in_evictable_[size_t(b)] = 1;
    } else {
        free_.push_back(b);
    }
}

void BlockPool::register_hash(int32_t b, uint64_t hash) {
    QS_CHECK(ref_[size_t(b)] > 0);
    if (has_hash_[size_t(b)] || hash_to_block_.count(hash)) return;
    hash_to_block_[hash] = b;
    block_hash_[size_t(b)] = hash;
    has_hash_[size_t(b)] = 1;
}

std::optional<int32_t> BlockPool::acquire_cached(uint64_t hash) {
    auto it = hash_to_block_.find(hash);
    if (it == hash_to_block_.end()) return std::nullopt;
    retain(it->second);
    return it->second;
}

void BlockPool::unregister(int32_t b) {
    if (!has_hash_[size_t(b)]) return;
    hash_to_block_.erase(block_hash_[size_t(b)]);
    has_hash_[size_t(b)] = 0;
}

void BlockPool::clear_cache() {
    for (int32_t b : evictable_) {
        in_evictable_[size_t(b)] = 0;
        unregister(b);
        free_.push_back(b);
    }
    evictable_.clear();
    for (size_t b = 0; b < ref_.size(); ++b) unregister(int32_t(b));
}

uint64_t chain_block_hash(uint64_t prev, const int32_t* tokens, int64_t n) {
    uint64_t h = prev ^ 0x9e3779b97f4a7c15ull;
    for (int64_t i = 0; i < n; ++i) {
        h ^= uint64_t(uint32_t(tokens[i])) + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
        h *= 0xff51afd7ed558ccdull;
        h ^= h >> 33;
    }
    return h;
}

}  // namespace qs

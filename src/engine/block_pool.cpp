// BlockPool (see block_pool.h).
#include "engine/block_pool.h"

#include <algorithm>

#include "core/check.h"

namespace qs {

BlockPool::BlockPool(int64_t num_blocks, int64_t block_size)
    : block_size_(block_size),
      ref_(size_t(num_blocks), 0),
      evictable_pos_(size_t(num_blocks)),
      in_evictable_(size_t(num_blocks), 0),
      has_hash_(size_t(num_blocks), 0),
      block_hash_(size_t(num_blocks)),
      serial_(size_t(num_blocks), 0),
      parent_(size_t(num_blocks), 0),
      tokens_(size_t(num_blocks * block_size), 0) {
    QS_CHECK(block_size > 0);
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

bool BlockPool::same_page(int32_t b, uint64_t parent, const int32_t* tokens) const {
    return parent_[size_t(b)] == parent &&
           std::equal(tokens, tokens + block_size_, tokens_.begin() + int64_t(b) * block_size_);
}

uint64_t BlockPool::register_page(int32_t b, const PageHash& hash, uint64_t parent, const int32_t* tokens) {
    QS_CHECK(ref_[size_t(b)] > 0);
    if (has_hash_[size_t(b)])  // already registered (taken from the cache, or shared by a fork)
        return block_hash_[size_t(b)] == hash && same_page(b, parent, tokens) ? serial_[size_t(b)] : 0;
    auto it = hash_to_block_.find(hash);
    if (it != hash_to_block_.end()) {  // first one wins; an equal page stands for this prefix too
        if (same_page(it->second, parent, tokens)) return serial_[size_t(it->second)];
        ++num_hash_mismatches_;
        return 0;
    }
    hash_to_block_.emplace(hash, b);
    has_hash_[size_t(b)] = 1;
    block_hash_[size_t(b)] = hash;
    serial_[size_t(b)] = next_serial_++;
    parent_[size_t(b)] = parent;
    std::copy(tokens, tokens + block_size_, tokens_.begin() + int64_t(b) * block_size_);
    return serial_[size_t(b)];
}

std::optional<CachedPage> BlockPool::find(const PageHash& hash, uint64_t parent, const int32_t* tokens) {
    auto it = hash_to_block_.find(hash);
    if (it == hash_to_block_.end()) return std::nullopt;
    if (!same_page(it->second, parent, tokens)) {
        ++num_hash_mismatches_;
        return std::nullopt;
    }
    return CachedPage{it->second, serial_[size_t(it->second)]};
}

void BlockPool::unregister(int32_t b) {
    if (!has_hash_[size_t(b)]) return;
    hash_to_block_.erase(block_hash_[size_t(b)]);
    has_hash_[size_t(b)] = 0;
    serial_[size_t(b)] = 0;
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

}  // namespace qs

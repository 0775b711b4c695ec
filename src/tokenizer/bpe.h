// Byte-level BPE model: vocabulary and ranked merges, applied to one pre-tokenized piece at a
// time. Semantics of Hugging Face `tokenizers` BPE: start from one symbol per byte, repeatedly
// merge the adjacent pair with the lowest merge rank (leftmost first on ties) until no pair
// has a merge. With `ignore_merges`, a piece that is itself in the vocabulary is one token.
// Immutable after construction except for an internal, mutex-sharded cache of encoded pieces;
// encode_piece() is safe to call from many threads at once.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/status.h"

namespace qs::tok {

class BpeModel {
public:
    // vocab: (token in the ByteLevel alphabet, id); merges: pairs of ByteLevel tokens, by rank.
    static Result<std::unique_ptr<BpeModel>> create(
        const std::vector<std::pair<std::string, int32_t>>& vocab,
        const std::vector<std::pair<std::string, std::string>>& merges, bool ignore_merges);

    // Appends the ids of one piece (raw bytes) to `out`.
    void encode_piece(std::string_view piece, std::vector<int32_t>& out) const;

    // Lookups by the token's ByteLevel spelling (as in tokenizer.json).
    std::optional<int32_t> token_to_id(std::string_view token) const;
    // The ByteLevel spelling and the raw bytes of an id; nullptr if the id is not in the vocab.
    const std::string* id_to_token(int32_t id) const;
    const std::string* id_to_bytes(int32_t id) const;

    // One more than the largest id.
    int32_t id_end() const { return static_cast<int32_t>(tokens_.size()); }
    size_t num_tokens() const { return token_ids_.size(); }
    size_t num_merges() const { return num_merges_; }

private:
    BpeModel() = default;
    struct MergeResult {
        uint32_t rank;
        int32_t new_id;
    };
    // Open-addressing table (left_id, right_id) -> merge; keys packed into 64 bits.
    struct MergeTable {
        std::vector<uint64_t> keys;
        std::vector<MergeResult> values;
        uint64_t mask = 0;
        void init(size_t count);
        void insert(uint64_t key, MergeResult value);
        const MergeResult* find(uint64_t key) const;
    };
    static uint64_t pair_key(int32_t a, int32_t b) {
        return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
    }

    void merge_small(std::vector<int32_t>& symbols) const;
    void merge_large(std::vector<int32_t>& symbols) const;
    bool cache_get(std::string_view piece, std::vector<int32_t>& out) const;
    void cache_put(std::string_view piece, const int32_t* ids, size_t n) const;

    std::vector<std::string> tokens_;      // id -> ByteLevel spelling ("" if unused id)
    std::vector<std::string> token_bytes_; // id -> raw bytes
    std::vector<uint8_t> has_id_;
    std::unordered_map<std::string, int32_t> token_ids_;   // ByteLevel spelling -> id
    std::unordered_map<std::string, int32_t> bytes_ids_;   // raw bytes -> id (ignore_merges)
    std::array<int32_t, 256> byte_ids_{};
    MergeTable merges_;
    size_t num_merges_ = 0;
    bool ignore_merges_ = false;

    static constexpr size_t kCacheShards = 16;
    static constexpr size_t kCacheShardCapacity = 8192;
    static constexpr size_t kCacheMaxPieceBytes = 256;
    struct CacheShard {
        std::mutex mutex;
        std::unordered_map<std::string, std::vector<int32_t>> map;
    };
    mutable std::array<CacheShard, kCacheShards> cache_;
};

}  // namespace qs::tok

// Byte-level BPE merging (see bpe.h).
#include "tokenizer/bpe.h"

#include <functional>
#include <queue>

#include "tokenizer/unicode.h"

namespace qs::tok {

namespace {
constexpr uint64_t kEmptyKey = ~uint64_t{0};

inline uint64_t mix(uint64_t key) {
    key ^= key >> 29;
    key *= 0xBF58476D1CE4E5B9ull;
    key ^= key >> 32;
    return key;
}
}  // namespace

void BpeModel::MergeTable::init(size_t count) {
    size_t capacity = 16;
    while (capacity < count * 2) capacity <<= 1;
    keys.assign(capacity, kEmptyKey);
    values.assign(capacity, MergeResult{0, 0});
    mask = capacity - 1;
}

void BpeModel::MergeTable::insert(uint64_t key, MergeResult value) {
    for (uint64_t i = mix(key) & mask;; i = (i + 1) & mask) {
        if (keys[i] == kEmptyKey) {
            keys[i] = key;
            values[i] = value;
            return;
        }
        if (keys[i] == key) {  // a repeated merge takes its last rank, as HF's map build does
            values[i] = value;
            return;
        }
    }
}

const BpeModel::MergeResult* BpeModel::MergeTable::find(uint64_t key) const {
    for (uint64_t i = mix(key) & mask;; i = (i + 1) & mask) {
        if (keys[i] == key) return &values[i];
        if (keys[i] == kEmptyKey) return nullptr;
    }
}

Result<std::unique_ptr<BpeModel>> BpeModel::create(
    const std::vector<std::pair<std::string, int32_t>>& vocab,
    const std::vector<std::pair<std::string, std::string>>& merges, bool ignore_merges) {
    std::unique_ptr<BpeModel> model(new BpeModel());
    model->ignore_merges_ = ignore_merges;
    int32_t max_id = -1;
    for (const auto& [token, id] : vocab) {
        if (id < 0) return corrupt_data("vocab token '" + token + "' has a negative id");
        max_id = std::max(max_id, id);
    }
    model->tokens_.resize(static_cast<size_t>(max_id + 1));
    model->token_bytes_.resize(static_cast<size_t>(max_id + 1));
    model->has_id_.assign(static_cast<size_t>(max_id + 1), 0);
    model->token_ids_.reserve(vocab.size());
    for (const auto& [token, id] : vocab) {
        if (model->has_id_[id]) return corrupt_data("vocab has two tokens with id " + std::to_string(id));
        std::string bytes;
        if (!byte_level_to_bytes(token, bytes))
            return unsupported("vocab token '" + token +
                               "' is not in the ByteLevel alphabet (only byte-level BPE is supported)");
        model->has_id_[id] = 1;
        model->tokens_[id] = token;
        model->token_bytes_[id] = bytes;
        model->token_ids_.emplace(token, id);
        if (ignore_merges) model->bytes_ids_.emplace(bytes, id);
    }
    const ByteLevelMap& map = byte_level_map();
    for (int b = 0; b < 256; ++b) {
        std::string ch;
        utf8_append(ch, map.byte_to_cp[b]);
        auto it = model->token_ids_.find(ch);
        if (it == model->token_ids_.end())
            return unsupported("vocab lacks the byte token for byte " + std::to_string(b) +
                               " (byte-level BPE needs all 256)");
        model->byte_ids_[b] = it->second;
    }
    model->merges_.init(merges.size());
    for (size_t rank = 0; rank < merges.size(); ++rank) {
        const auto& [left, right] = merges[rank];
        auto l = model->token_ids_.find(left);
        auto r = model->token_ids_.find(right);
        auto m = model->token_ids_.find(left + right);
        if (l == model->token_ids_.end() || r == model->token_ids_.end() ||
            m == model->token_ids_.end())
            return corrupt_data("merge " + std::to_string(rank) + " ('" + left + "' '" + right +
                                "') uses a token that is not in the vocab");
        model->merges_.insert(pair_key(l->second, r->second),
                              MergeResult{static_cast<uint32_t>(rank), m->second});
    }
    model->num_merges_ = merges.size();
    return model;
}

std::optional<int32_t> BpeModel::token_to_id(std::string_view token) const {
    auto it = token_ids_.find(std::string(token));
    if (it == token_ids_.end()) return std::nullopt;
    return it->second;
}

const std::string* BpeModel::id_to_token(int32_t id) const {
    if (id < 0 || id >= id_end() || !has_id_[id]) return nullptr;
    return &tokens_[id];
}

const std::string* BpeModel::id_to_bytes(int32_t id) const {
    if (id < 0 || id >= id_end() || !has_id_[id]) return nullptr;
    return &token_bytes_[id];
}

// Quadratic but cache-friendly: rescans the pairs after each merge. Used for short pieces.
void BpeModel::merge_small(std::vector<int32_t>& symbols) const {
    while (symbols.size() > 1) {
        uint32_t best_rank = UINT32_MAX;
        size_t best_pos = 0;
        int32_t best_id = 0;
        for (size_t i = 0; i + 1 < symbols.size(); ++i) {
            const MergeResult* m = merges_.find(pair_key(symbols[i], symbols[i + 1]));
            if (m != nullptr && m->rank < best_rank) {
                best_rank = m->rank;
                best_pos = i;
                best_id = m->new_id;
            }
        }
        if (best_rank == UINT32_MAX) return;
        symbols[best_pos] = best_id;
        symbols.erase(symbols.begin() + static_cast<ptrdiff_t>(best_pos) + 1);
    }
}

// Heap of candidate merges ordered by (rank, position) over a linked list of symbols, with
// stale entries skipped when popped: the same order as the quadratic loop, in O(n log n).
void BpeModel::merge_large(std::vector<int32_t>& symbols) const {
    const size_t n = symbols.size();
    std::vector<int32_t> prev(n), next(n);
    std::vector<uint8_t> alive(n, 1);
    for (size_t i = 0; i < n; ++i) {
        prev[i] = static_cast<int32_t>(i) - 1;
        next[i] = i + 1 < n ? static_cast<int32_t>(i + 1) : -1;
    }
    struct Candidate {
        uint32_t rank;
        int32_t pos;
        int32_t new_id;
        bool operator>(const Candidate& o) const {
            return rank != o.rank ? rank > o.rank : pos > o.pos;
        }
    };
    std::priority_queue<Candidate, std::vector<Candidate>, std::greater<Candidate>> queue;
    auto push_pair = [&](int32_t left) {
        if (left < 0 || next[left] < 0) return;
        const MergeResult* m = merges_.find(pair_key(symbols[left], symbols[next[left]]));
        if (m != nullptr) queue.push(Candidate{m->rank, left, m->new_id});
    };
    for (size_t i = 0; i + 1 < n; ++i) push_pair(static_cast<int32_t>(i));
    while (!queue.empty()) {
        const Candidate top = queue.top();
        queue.pop();
        const int32_t left = top.pos;
        if (!alive[left] || next[left] < 0) continue;
        const int32_t right = next[left];
        const MergeResult* m = merges_.find(pair_key(symbols[left], symbols[right]));
        if (m == nullptr || m->new_id != top.new_id || m->rank != top.rank) continue;
        symbols[left] = top.new_id;
        alive[right] = 0;
        next[left] = next[right];
        if (next[right] >= 0) prev[next[right]] = left;
        push_pair(prev[left]);
        push_pair(left);
    }
    size_t out = 0;
    for (int32_t i = 0; i >= 0; i = next[i]) symbols[out++] = symbols[i];
    symbols.resize(out);
}

bool BpeModel::cache_get(std::string_view piece, std::vector<int32_t>& out) const {
    CacheShard& shard = cache_[std::hash<std::string_view>{}(piece) % kCacheShards];
    std::lock_guard<std::mutex> lock(shard.mutex);
    auto it = shard.map.find(std::string(piece));
    if (it == shard.map.end()) return false;
    out.insert(out.end(), it->second.begin(), it->second.end());
    return true;
}

void BpeModel::cache_put(std::string_view piece, const int32_t* ids, size_t n) const {
    CacheShard& shard = cache_[std::hash<std::string_view>{}(piece) % kCacheShards];
    std::lock_guard<std::mutex> lock(shard.mutex);
    if (shard.map.size() >= kCacheShardCapacity) shard.map.clear();
    shard.map.emplace(std::string(piece), std::vector<int32_t>(ids, ids + n));
}

void BpeModel::encode_piece(std::string_view piece, std::vector<int32_t>& out) const {
    if (piece.empty()) return;
    if (piece.size() == 1) {
        out.push_back(byte_ids_[static_cast<uint8_t>(piece[0])]);
        return;
    }
    if (ignore_merges_) {
        auto it = bytes_ids_.find(std::string(piece));
        if (it != bytes_ids_.end()) {
            out.push_back(it->second);
            return;
        }
    }
    const bool cacheable = piece.size() <= kCacheMaxPieceBytes;
    if (cacheable && cache_get(piece, out)) return;
    thread_local std::vector<int32_t> symbols;
    symbols.clear();
    for (char c : piece) symbols.push_back(byte_ids_[static_cast<uint8_t>(c)]);
    if (symbols.size() <= 48) {
        merge_small(symbols);
    } else {
        merge_large(symbols);
    }
    out.insert(out.end(), symbols.begin(), symbols.end());
    if (cacheable) cache_put(piece, symbols.data(), symbols.size());
}

}  // namespace qs::tok

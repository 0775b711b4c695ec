// Tokenizer encode/decode (loading is in tokenizer_loader.cpp). The encode pipeline, as in HF
// `tokenizers`: repair UTF-8 -> split out raw-matched added tokens -> NFC each remaining
// segment -> split out normalised added tokens -> regex pre-tokenize -> BPE each piece ->
// post-processor. Any thread.
#include "tokenizer/tokenizer.h"

#include "tokenizer/unicode.h"

namespace qs::tok {

void Tokenizer::encode_normalized(std::string_view text, std::vector<int32_t>& out) const {
    thread_local std::vector<std::string_view> pieces;
    pieces.clear();
    splitter_->split(text, pieces);
    for (std::string_view piece : pieces) model_->encode_piece(piece, out);
}

void Tokenizer::encode_segment(std::string_view text, std::vector<int32_t>& out) const {
    if (text.empty()) return;
    const std::string normalized = nfc_ ? nfc(text) : std::string(text);
    const std::string_view view(normalized);
    size_t pos = 0;
    AddedTokenMatcher::Match match{};
    while (normalized_matcher_.find(view, pos, match)) {
        encode_normalized(view.substr(pos, match.begin - pos), out);
        out.push_back(match.id);
        pos = match.end;
    }
    encode_normalized(view.substr(pos), out);
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_special_tokens) const {
    std::string repaired;
    if (!is_valid_utf8(text)) {
        repaired = utf8_repair(text);
        text = repaired;
    }
    std::vector<int32_t> ids;
    ids.reserve(text.size() / 3 + 4);
    if (add_special_tokens) ids.insert(ids.end(), prefix_ids_.begin(), prefix_ids_.end());
    size_t pos = 0;
    AddedTokenMatcher::Match match{};
    while (raw_matcher_.find(text, pos, match)) {
        encode_segment(text.substr(pos, match.begin - pos), ids);
        ids.push_back(match.id);
        pos = match.end;
    }
    encode_segment(text.substr(pos), ids);
    if (add_special_tokens) ids.insert(ids.end(), suffix_ids_.begin(), suffix_ids_.end());
    return ids;
}

std::string_view Tokenizer::token_bytes(int32_t id, bool skip_special_tokens) const {
    auto it = added_index_.find(id);
    if (it != added_index_.end()) {
        if (skip_special_tokens && added_[it->second].special) return {};
        return added_bytes_[it->second];
    }
    const std::string* bytes = model_->id_to_bytes(id);
    return bytes == nullptr ? std::string_view() : std::string_view(*bytes);
}

std::string Tokenizer::decode(std::span<const int32_t> ids, bool skip_special_tokens) const {
    std::string bytes;
    for (int32_t id : ids) bytes.append(token_bytes(id, skip_special_tokens));
    if (is_valid_utf8(bytes)) return bytes;
    return utf8_repair(bytes);
}

std::optional<int32_t> Tokenizer::token_to_id(std::string_view token) const {
    auto it = added_ids_.find(std::string(token));
    if (it != added_ids_.end()) return it->second;
    return model_->token_to_id(token);
}

std::optional<std::string> Tokenizer::id_to_token(int32_t id) const {
    auto it = added_index_.find(id);
    if (it != added_index_.end()) return added_[it->second].content;
    const std::string* token = model_->id_to_token(id);
    if (token == nullptr) return std::nullopt;
    return *token;
}

bool Tokenizer::is_special(int32_t id) const {
    auto it = added_index_.find(id);
    return it != added_index_.end() && added_[it->second].special;
}

int32_t Tokenizer::vocab_size() const {
    int32_t end = model_->id_end();
    for (const AddedToken& a : added_) end = std::max(end, a.id + 1);
    return end;
}

}  // namespace qs::tok

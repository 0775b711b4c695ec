// Trie matching of added tokens (see added_tokens.h).
#include "tokenizer/added_tokens.h"

namespace qs::tok {

int32_t AddedTokenMatcher::child(int32_t node, uint8_t byte) const {
    for (const auto& [b, index] : nodes_[node].children)
        if (b == byte) return index;
    return -1;
}

void AddedTokenMatcher::build(const std::vector<const AddedToken*>& tokens) {
    nodes_.assign(1, Node{});
    for (bool& f : first_byte_) f = false;
    for (const AddedToken* token : tokens) {
        if (token->content.empty()) continue;
        int32_t node = 0;
        for (char c : token->content) {
            const auto byte = static_cast<uint8_t>(c);
            int32_t next = child(node, byte);
            if (next < 0) {
                next = static_cast<int32_t>(nodes_.size());
                nodes_[node].children.emplace_back(byte, next);
                nodes_.push_back(Node{});
            }
            node = next;
        }
        nodes_[node].token_id = token->id;
        first_byte_[static_cast<uint8_t>(token->content[0])] = true;
    }
}

bool AddedTokenMatcher::find(std::string_view text, size_t from, Match& match) const {
    if (empty()) return false;
    for (size_t start = from; start < text.size(); ++start) {
        if (!first_byte_[static_cast<uint8_t>(text[start])]) continue;
        int32_t node = 0;
        int32_t best_id = -1;
        size_t best_end = 0;
        for (size_t i = start; i < text.size(); ++i) {
            node = child(node, static_cast<uint8_t>(text[i]));
            if (node < 0) break;
            if (nodes_[node].token_id >= 0) {
                best_id = nodes_[node].token_id;
                best_end = i + 1;
            }
        }
        if (best_id >= 0) {
            match = Match{start, best_end, best_id};
            return true;
        }
    }
    return false;
}

}  // namespace qs::tok

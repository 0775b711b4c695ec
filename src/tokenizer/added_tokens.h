// Added tokens (special and not) matched in raw text before normalisation and
// pre-tokenization, as Hugging Face's AddedVocabulary does: leftmost match wins, and among
// matches starting at the same place the longest. Immutable after construction; thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace qs::tok {

struct AddedToken {
    int32_t id = 0;
    std::string content;
    bool special = false;
    bool normalized = false;  // matched after normalisation rather than on raw text
};

class AddedTokenMatcher {
public:
    void build(const std::vector<const AddedToken*>& tokens);
    bool empty() const { return nodes_.size() <= 1; }

    struct Match {
        size_t begin;
        size_t end;
        int32_t id;
    };
    // First match at or after `from`; false if none.
    bool find(std::string_view text, size_t from, Match& match) const;

private:
    struct Node {
        int32_t token_id = -1;
        std::vector<std::pair<uint8_t, int32_t>> children;  // byte -> node index
    };
    int32_t child(int32_t node, uint8_t byte) const;
    std::vector<Node> nodes_{Node{}};
    bool first_byte_[256] = {};
};

}  // namespace qs::tok

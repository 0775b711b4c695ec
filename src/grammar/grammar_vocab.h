// What the grammar engine needs to know about the model's vocabulary: the bytes each token id
// writes, which ids a grammar may never produce, the stop tokens, and the model-specific
// markers (the end of reasoning, the tool-call format). Built once at server start from the
// tokenizer; immutable afterwards, any thread.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace qs::tok {
class Tokenizer;
}

namespace qs::grammar {

struct GrammarVocab {
    // Per tokenizer id, the bytes the token writes; "" marks an id a grammar never allows
    // (special tokens, and added markers such as <think> that would change how the reply is
    // parsed).
    std::vector<std::string> tokens;
    int32_t vocab_size = 0;                  // the model's logits width (>= tokens.size(): padding)
    std::vector<int32_t> stop_token_ids;     // allowed where the grammar may end
    std::optional<int32_t> reasoning_end_id;  // </think>: chat constraints start after it
    bool tool_calls_xml = true;              // Qwen3.5/3.6 XML tool calls (else Qwen3 JSON)
};

// The vocabulary of a tokenizer for a model with `model_vocab_size` logits. Special tokens and
// the non-special added tokens other than <tool_call> / </tool_call> are never allowed.
GrammarVocab grammar_vocab_from_tokenizer(const tok::Tokenizer& tokenizer, int32_t model_vocab_size,
                                          std::vector<int32_t> stop_token_ids, bool tool_calls_xml);

}  // namespace qs::grammar

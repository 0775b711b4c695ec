// GrammarVocab from the tokenizer (see grammar_vocab.h).
#include "grammar/grammar_vocab.h"

#include <algorithm>

#include "tokenizer/tokenizer.h"

namespace qs::grammar {

GrammarVocab grammar_vocab_from_tokenizer(const tok::Tokenizer& tokenizer, int32_t model_vocab_size,
                                          std::vector<int32_t> stop_token_ids, bool tool_calls_xml) {
    GrammarVocab v;
    const int32_t n = tokenizer.vocab_size();
    v.vocab_size = std::max(model_vocab_size, n);
    v.tokens.resize(size_t(n));
    for (int32_t id = 0; id < n; ++id) v.tokens[size_t(id)] = std::string(tokenizer.token_bytes(id));
    // Added tokens write their content, but a grammar must not produce a marker the output
    // parsers read (<think>, <tool_response>, <|fim_*|>, ...) as if it were text: only the
    // tool-call brackets stay, for the tool-call grammars.
    for (const tok::AddedToken& t : tokenizer.added_tokens()) {
        if (t.id < 0 || t.id >= n) continue;
        if (!t.special && (t.content == "<tool_call>" || t.content == "</tool_call>")) continue;
        v.tokens[size_t(t.id)].clear();
    }
    for (int32_t id : stop_token_ids)
        if (id >= 0 && id < v.vocab_size) v.stop_token_ids.push_back(id);
    v.reasoning_end_id = tokenizer.token_to_id("</think>");
    v.tool_calls_xml = tool_calls_xml;
    return v;
}

}  // namespace qs::grammar

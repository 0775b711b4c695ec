// Structured outputs, decode side: one matcher per sequence, over a CompiledGrammar. Each step
// it writes the bitmask of the tokens the grammar allows next (the sampler bans the rest,
// backend/sampling.h) and advances by the token drawn. xgrammar's GrammarMatcher behind it;
// nothing throws. Engine thread only.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "grammar/grammar_compiler.h"

namespace qs::grammar {

class GrammarMatcher {
public:
    // stop_token_ids: the tokens that end the output once the grammar is complete (EOS ids and
    // the request's stop_token_ids); they are all the mask allows when nothing else may follow.
    GrammarMatcher(std::shared_ptr<const CompiledGrammar> grammar, const std::vector<int32_t>& stop_token_ids);
    ~GrammarMatcher();
    GrammarMatcher(const GrammarMatcher&) = delete;
    GrammarMatcher& operator=(const GrammarMatcher&) = delete;

    // A copy in the same state (n > 1: each completion continues from the shared prompt).
    std::unique_ptr<GrammarMatcher> fork() const;

    // Advances by `token`; false (state unchanged) when the grammar does not allow it.
    bool accept(int32_t token);
    // Writes bitmask_words(vocab_size) words: bit t % 32 of word t / 32 set iff token t may come
    // next. Returns the number of allowed tokens; 0 means the matcher is terminated (or failed).
    int64_t fill_next_bitmask(uint32_t* words);
    // A stop token was accepted: the output is complete.
    bool terminated() const;
    int32_t vocab_size() const { return grammar_->vocab_size(); }

private:
    struct Impl;
    GrammarMatcher(std::shared_ptr<const CompiledGrammar> grammar, std::unique_ptr<Impl> impl);
    std::shared_ptr<const CompiledGrammar> grammar_;
    std::unique_ptr<Impl> impl_;
};

}  // namespace qs::grammar

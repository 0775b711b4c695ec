// Structured outputs, decode side: one matcher per sequence, over a CompiledGrammar. Each step
// it writes the bitmask of the tokens the grammar allows next (the sampler bans the rest,
// backend/sampling.h) and advances by the token drawn. xgrammar's GrammarMatcher behind it;
// nothing throws. The engine thread owns it; between BitmaskFiller::start and wait one filler
// thread uses it instead.
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
    // Advances by `token` at the start of the next fill_next_bitmask (or accept, fork,
    // terminated), so that the engine's accepts run on the mask filler's threads, each beside its
    // row's next mask, instead of one after the other on the engine thread. For a token the last
    // mask allowed (which the caller has checked), so the accept cannot fail; should it fail
    // anyway (xgrammar disagreeing with its own mask), the fill reports nothing allowed. At most
    // one token waits; a second defer applies the first.
    void accept_later(int32_t token);
    // Writes bitmask_words(vocab_size) words: bit t % 32 of word t / 32 set iff token t may come
    // next. Returns the number of allowed tokens; 0 means the matcher is terminated (or failed).
    int64_t fill_next_bitmask(uint32_t* words);
    // A stop token was accepted: the output is complete.
    bool terminated() const;
    // One of the stop tokens given at construction: accepting it (where a mask allows it)
    // completes the grammar.
    bool is_stop_token(int32_t token) const;
    int32_t vocab_size() const { return grammar_->vocab_size(); }

private:
    struct Impl;
    GrammarMatcher(std::shared_ptr<const CompiledGrammar> grammar, std::unique_ptr<Impl> impl,
                   std::vector<int32_t> stop_token_ids);
    // Applies the token accept_later left; false when xgrammar refused it.
    bool apply_deferred() const;
    std::shared_ptr<const CompiledGrammar> grammar_;
    std::unique_ptr<Impl> impl_;
    std::vector<int32_t> stop_token_ids_;
    // accept_later's token, or -1. Applying it changes no observable state (every reader applies
    // it first), hence mutable.
    mutable int32_t deferred_ = -1;
};

}  // namespace qs::grammar

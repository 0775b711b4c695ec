// GrammarMatcher over xgrammar::GrammarMatcher (see grammar_matcher.h). Engine thread (or the
// mask filler's, between its start and wait).
#include "grammar/grammar_matcher.h"

#include <algorithm>
#include <bit>
#include <cstring>

#include "core/log.h"
#include "grammar/xgrammar_bridge.h"

namespace qs::grammar {

struct GrammarMatcher::Impl {
    xgrammar::GrammarMatcher matcher;
};

GrammarMatcher::GrammarMatcher(std::shared_ptr<const CompiledGrammar> grammar, const std::vector<int32_t>& stop_token_ids)
    : grammar_(std::move(grammar)),
      impl_(std::make_unique<Impl>(Impl{xgrammar::GrammarMatcher(
          grammar_->impl().compiled, std::vector<int>(stop_token_ids.begin(), stop_token_ids.end()),
          /*terminate_without_stop_token=*/false)})),
      stop_token_ids_(stop_token_ids) {}

GrammarMatcher::GrammarMatcher(std::shared_ptr<const CompiledGrammar> grammar, std::unique_ptr<Impl> impl,
                               std::vector<int32_t> stop_token_ids)
    : grammar_(std::move(grammar)), impl_(std::move(impl)), stop_token_ids_(std::move(stop_token_ids)) {}

GrammarMatcher::~GrammarMatcher() = default;

std::unique_ptr<GrammarMatcher> GrammarMatcher::fork() const {
    apply_deferred();
    return std::unique_ptr<GrammarMatcher>(
        new GrammarMatcher(grammar_, std::make_unique<Impl>(Impl{impl_->matcher.Fork()}), stop_token_ids_));
}

bool GrammarMatcher::apply_deferred() const {
    if (deferred_ < 0) return true;
    const int32_t token = deferred_;
    deferred_ = -1;
    try {
        if (impl_->matcher.AcceptToken(token)) return true;
        log_warn("grammar: the deferred token {} was refused although the mask allowed it", token);
    } catch (const std::exception& e) {
        log_warn("grammar: accepting the deferred token {} failed: {}", token, e.what());
    }
    return false;
}

void GrammarMatcher::accept_later(int32_t token) {
    apply_deferred();
    deferred_ = token;
}

bool GrammarMatcher::is_stop_token(int32_t token) const {
    return std::find(stop_token_ids_.begin(), stop_token_ids_.end(), token) != stop_token_ids_.end();
}

bool GrammarMatcher::accept(int32_t token) {
    apply_deferred();
    try {
        return impl_->matcher.AcceptToken(token);
    } catch (const std::exception& e) {
        log_warn("grammar: accepting token {} failed: {}", token, e.what());
        return false;
    }
}

int64_t GrammarMatcher::fill_next_bitmask(uint32_t* words) {
    const int64_t W = (int64_t(grammar_->vocab_size()) + 31) / 32;
    if (!apply_deferred() || impl_->matcher.IsTerminated()) {
        std::memset(words, 0, size_t(W) * sizeof(uint32_t));
        return 0;
    }
    int64_t shape[1] = {W};
    DLTensor t;
    t.data = words;
    t.device = DLDevice{kDLCPU, 0};
    t.ndim = 1;
    t.dtype = xgrammar::GetBitmaskDLType();
    t.shape = shape;
    t.strides = nullptr;
    t.byte_offset = 0;
    try {
        impl_->matcher.FillNextTokenBitmask(&t, 0);
    } catch (const std::exception& e) {
        log_warn("grammar: filling the token bitmask failed: {}", e.what());
        std::memset(words, 0, size_t(W) * sizeof(uint32_t));
        return 0;
    }
    // Nothing at or past the vocabulary size is ever allowed.
    const int32_t V = grammar_->vocab_size();
    if (V % 32) words[W - 1] &= (1u << (V % 32)) - 1u;
    int64_t n = 0;
    for (int64_t w = 0; w < W; ++w) n += std::popcount(words[w]);
    return n;
}

bool GrammarMatcher::terminated() const {
    apply_deferred();
    return impl_->matcher.IsTerminated();
}

}  // namespace qs::grammar

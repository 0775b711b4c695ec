// Engine, structured outputs: a matcher per sequence of a request with a grammar, the mask of
// allowed next tokens for each of its draws (filled on the host's threads while the engine thread
// runs the step's forward; the sampler bans what it excludes, backend/sampling.h), and the advance by each
// token drawn (checked against the mask at once, accepted by the matcher at the start of the
// sequence's next fill, on the same threads: no serial per-row grammar work between the steps).
// A grammar that is complete allows only the stop tokens, so the request ends with "stop"; one
// that cannot complete in max_tokens ends with "length" like any other. Engine thread.
#include <fmt/format.h>

#include <algorithm>

#include "core/log.h"
#include "engine/engine.h"

namespace qs {

std::unique_ptr<grammar::GrammarMatcher> Engine::make_matcher(const GenerationRequest& r) const {
    std::vector<int32_t> stops;
    for (int64_t id : weights_.config.eos_token_ids) stops.push_back(int32_t(id));
    for (int32_t id : r.params.stop_token_ids)
        if (std::find(stops.begin(), stops.end(), id) == stops.end()) stops.push_back(id);
    return std::make_unique<grammar::GrammarMatcher>(r.grammar, stops);
}

int32_t Engine::add_grammar_mask(Sequence& s) {
    if (!s.matcher || !s.grammar_active) return -1;
    const int64_t W = bitmask_words(weights_.config.vocab_size);
    // The fill writes every word of the row (the grammar's vocabulary is the model's: the server
    // refuses others), so the row is left unset here: no 31 KB memset per row and step.
    QS_CHECK(bitmask_words(s.matcher->vocab_size()) == W);
    auto& m = sampling_.bitmask;
    const int32_t row = int32_t(int64_t(m.size()) / W);
    m.resize(m.size() + size_t(W));
    mask_rows_.push_back({&s, row});
    return row;
}

void Engine::start_grammar_masks(const SchedulerOutput& sched) {
    sampling_.clear();
    mask_row_of_.assign(sched.scheduled.size(), -1);
    for (size_t i = 0; i < sched.scheduled.size(); ++i) {
        const ScheduledSeq& ss = sched.scheduled[i];
        if (!ss.verify && ss.seq->num_computed + ss.num_tokens == int64_t(ss.seq->tokens.size()))
            mask_row_of_[i] = add_grammar_mask(*ss.seq);
    }
    mask_jobs_.clear();
    if (mask_rows_.empty()) return;
    if (!mask_filler_) mask_filler_ = std::make_unique<grammar::BitmaskFiller>(int(config_.grammar_mask_threads));
    const int64_t W = bitmask_words(weights_.config.vocab_size);
    for (const auto& [s, row] : mask_rows_)
        mask_jobs_.push_back({s->matcher.get(), sampling_.bitmask.data() + int64_t(row) * W, 0});
    mask_filler_->start(mask_jobs_);
}

void Engine::finish_grammar_masks() {
    mask_allowed_.clear();
    if (mask_rows_.empty()) return;
    mask_filler_->wait();
    for (size_t i = 0; i < mask_jobs_.size(); ++i) {
        mask_allowed_.push_back(mask_jobs_[i].num_allowed);
        if (mask_jobs_[i].num_allowed != 0) continue;
        // A running sequence's matcher is never terminated (accepting a stop token finishes
        // it); should xgrammar fail anyway (or refuse the token its last mask allowed), only
        // EOS is left, which ends the request.
        log_warn("grammar: request {} has no allowed next token; ending it", mask_rows_[i].first->request->request.id);
        for (int64_t id : weights_.config.eos_token_ids) mask_jobs_[i].words[id >> 5] |= 1u << (id & 31);
        mask_allowed_.back() = -1;  // not counted
    }
    mask_rows_.clear();
}

bool Engine::advance_grammar(Sequence& s, int32_t token, int32_t sample_row, PendingOutput& out) {
    if (!s.grammar_active) {
        if (token == s.request->request.grammar_after_token) s.grammar_active = true;
        return true;
    }
    const int32_t mask_row = sampling_.rows[size_t(sample_row)].bitmask_row;
    if (mask_row >= 0) {
        // The row's mask is the matcher's exact set of acceptable tokens: the check is the
        // accept's verdict, and a stop token it allows completes the grammar.
        const int64_t W = bitmask_words(weights_.config.vocab_size);
        if (token >= 0 && token < s.matcher->vocab_size() &&
            bitmask_allows(sampling_.bitmask.data() + int64_t(mask_row) * W, token)) {
            if (s.matcher->is_stop_token(token)) {
                finish(s, FinishReason::kStop, out, std::to_string(token));
                return false;
            }
            s.matcher->accept_later(token);
            return true;
        }
    } else if (s.matcher->accept(token)) {
        if (!s.matcher->terminated()) return true;
        finish(s, FinishReason::kStop, out, std::to_string(token));  // a stop token completed the grammar
        return false;
    }
    // Only a sampler that ignored the mask gets here (a bug): constrained sequences do not
    // draft, so --benchmark-mtp-acceptance never forces their tokens.
    out.error = fmt::format("token {} does not follow the request's grammar", token);
    finish(s, FinishReason::kError, out);
    return false;
}

}  // namespace qs

// Engine, what a step emits: tokens appended to their sequences (logprobs, stop tokens and
// strings, length), finishes, the siblings of an n > 1 request forked at their first token, and
// the per-request outputs and stats published at the end of the step (see engine.h). Engine
// thread.
#include <algorithm>

#include "core/timer.h"
#include "engine/engine.h"

namespace qs {

void Engine::append_token(Sequence& s, int32_t token, int32_t sample_row, PendingOutput& out) {
    const SamplingParams& p = s.request->request.params;
    s.tokens.push_back(token);
    ++counters_.num_completion_tokens_total;
    if (s.timing.first_token_s < 0) s.timing.first_token_s = emit_time_s_;
    s.timing.last_token_s = emit_time_s_;
    out.token_ids.push_back(token);
    if (p.logprobs >= 0) {
        const size_t at = size_t(sample_row);
        out.logprobs.push_back({token, sampled_.logprob[at]});
        std::vector<TokenLogprob> top(size_t(p.logprobs));
        for (size_t i = 0; i < top.size(); ++i)
            top[i] = {sampled_.top_ids[at * kMaxTopLogprobs + i], sampled_.top_logprobs[at * kMaxTopLogprobs + i]};
        out.top_logprobs.push_back(std::move(top));
    }
    if (s.matcher && !advance_grammar(s, token, sample_row, out)) return;
    const auto& eos = weights_.config.eos_token_ids;
    const bool is_eos = !p.ignore_eos && std::find(eos.begin(), eos.end(), token) != eos.end();
    const bool is_stop_token = std::find(p.stop_token_ids.begin(), p.stop_token_ids.end(), token) != p.stop_token_ids.end();
    if (is_eos || is_stop_token) {
        finish(s, FinishReason::kStop, out, std::to_string(token));
        return;
    }
    if (s.decoder) {
        // Stop strings, like stop tokens, count from min_tokens on (vLLM's rule).
        out.text += s.stop->add(s.decoder->push(token), s.num_output() >= p.min_tokens);
        if (s.stop->stopped()) {
            finish(s, FinishReason::kStop, out, s.stop->matched());
            return;
        }
    }
    if (s.num_output() >= p.max_tokens || int64_t(s.tokens.size()) >= plan_.max_model_len)
        finish(s, FinishReason::kLength, out);
}

void Engine::finish(Sequence& s, FinishReason reason, PendingOutput& out, const std::string& stop_reason) {
    if (s.status == SeqStatus::kFinished) return;
    if (reason != FinishReason::kStop || !s.stop->stopped()) {
        // Flush what the detokenizer and the stop checker still hold (a stop string can still match).
        if (s.decoder) out.text += s.stop->add(s.decoder->finish());
        if (s.stop->stopped()) {
            reason = FinishReason::kStop;
            out.stop_reason = s.stop->matched();
        } else {
            out.text += s.stop->flush();
            out.stop_reason = stop_reason;
        }
    } else {
        out.stop_reason = stop_reason;
    }
    out.finish_reason = reason;
    scheduler_->remove(&s);
    s.status = SeqStatus::kFinished;
    ++s.request->num_finished;
}

std::vector<Sequence*> Engine::fork_siblings(Sequence& parent, int32_t first_sibling_row) {
    RequestState& rs = *parent.request;
    rs.forked = true;
    std::vector<Sequence*> running;
    for (int32_t i = 1; i < int32_t(rs.request.params.n); ++i) {
        auto child = std::make_unique<Sequence>();
        child->id = next_seq_id_++;
        child->request = &rs;
        child->index = i;
        child->tokens = rs.request.prompt_ids;
        child->num_prompt = parent.num_prompt;
        child->num_cached_prompt = parent.num_cached_prompt;
        child->sample_key = sampling_key_for(parent, i);
        child->timing = parent.timing;  // arrival and first scheduling (the parent has no token yet)
        if (decoder_) child->decoder = decoder_->start(rs.request.params.skip_special_tokens);
        child->stop = std::make_unique<StopChecker>(rs.request.params.stop, rs.request.params.include_stop_str_in_output);
        if (parent.matcher) {  // before the parent takes its first token: the prompt's state
            child->matcher = parent.matcher->fork();
            child->grammar_active = parent.grammar_active;
        }
        Sequence* c = child.get();
        rs.seqs.push_back(std::move(child));
        if (scheduler_->num_running() < config_.max_num_seqs && cache_mgr_->fork(parent, *c)) {
            scheduler_->add_running(c);
            // Its first token was drawn with the parent's (sample_rows: the keys agree).
            const int32_t row = first_sibling_row + i - 1;
            append_token(*c, sampled_.token[size_t(row)], row, pending_for(*c));
            if (c->status != SeqStatus::kFinished) running.push_back(c);
        } else {
            scheduler_->add_waiting(c);  // recomputes the prompt (a prefix-cache hit when possible)
        }
    }
    return running;
}

Engine::PendingOutput& Engine::pending_for(Sequence& s) {
    if (s.pending_index < 0) {
        s.pending_index = int32_t(pending_seqs_.size());
        pending_seqs_.push_back(&s);
        if (pending_.size() < pending_seqs_.size()) pending_.emplace_back();
    }
    return pending_[size_t(s.pending_index)];
}

void Engine::flush_outputs() {
    // Only requests with output this step can have finished this step.
    std::vector<std::string> done;
    for (size_t i = 0; i < pending_seqs_.size(); ++i) {
        Sequence* seq = pending_seqs_[i];
        PendingOutput& out = pending_[i];
        seq->pending_index = -1;
        RequestState& rs = *seq->request;
        if (!out.token_ids.empty() || !out.text.empty() || out.finish_reason != FinishReason::kNone) {
            RequestOutput ro;
            ro.request_id = rs.request.id;
            ro.index = seq->index;
            ro.token_ids = std::move(out.token_ids);
            ro.text = std::move(out.text);
            ro.logprobs = std::move(out.logprobs);
            ro.top_logprobs = std::move(out.top_logprobs);
            ro.finish_reason = out.finish_reason;
            ro.stop_reason = std::move(out.stop_reason);
            ro.error = std::move(out.error);
            ro.num_prompt_tokens = seq->num_prompt;
            ro.num_cached_prompt_tokens = seq->num_cached_prompt;
            ro.num_completion_tokens = seq->num_output();
            if (out.finish_reason != FinishReason::kNone) ro.timing = seq->timing;
            if (rs.sink) rs.sink(std::move(ro));
        }
        out = PendingOutput();
        const bool complete = rs.num_finished >= rs.request.params.n && (rs.forked || rs.request.params.n == 1);
        if (complete && (done.empty() || done.back() != rs.request.id)) done.push_back(rs.request.id);
    }
    pending_seqs_.clear();
    if (done.empty()) return;
    std::sort(done.begin(), done.end());
    done.erase(std::unique(done.begin(), done.end()), done.end());
    {
        std::lock_guard<std::mutex> lock(inbox_mu_);
        for (const auto& id : done) live_ids_.erase(id);
    }
    for (const auto& id : done) requests_.erase(id);
}

void Engine::publish_stats() {
    EngineStats s = counters_;
    s.prefix_cache_queries = scheduler_->prefix_cache_queries();
    s.prefix_cache_hits = scheduler_->prefix_cache_hits();
    s.prefix_cache_hash_mismatches = cache_mgr_->pool().num_hash_mismatches();
    s.num_running = scheduler_->num_running();
    s.num_waiting = scheduler_->num_waiting();
    s.num_preemptions_total = scheduler_->num_preemptions_total();
    s.mtp_drafts = mtp_proposed_.empty() ? 0 : mtp_proposed_[0];  // every draft proposes position 0
    s.mtp_accepted_by_position = mtp_accepted_;
    const BlockPool& pool = cache_mgr_->pool();
    s.kv_usage = pool.num_blocks() ? double(pool.num_in_use()) / double(pool.num_blocks()) : 0.0;
    s.state_slot_usage = double(cache_mgr_->num_slots_in_use()) / double(cache_mgr_->num_running_slots());
    s.kv_pages_in_use = pool.num_in_use();
    s.state_slots_in_use = cache_mgr_->num_slots_in_use();
    std::lock_guard<std::mutex> lock(stats_mu_);
    stats_ = s;
}

}  // namespace qs

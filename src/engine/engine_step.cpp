// Engine, one step around the model: the forward batch from the schedule (verify spans defer
// their GDN state), the draws (engine_sampling.cpp), emitting the picked tokens, the GDN commit
// of each verified sequence's accepted rows (or, spare-slot mode, the swap to the slot that holds
// the state after every draft when all were accepted), and the MTP catch-up and draft forwards for the
// next verify (see engine.h). Engine thread.
#include "core/timer.h"
#include "engine/engine.h"

namespace qs {

void Engine::run_batch(const SchedulerOutput& sched) {
    // The batches are members reused from step to step; their block tables are views of the
    // sequences' own tables, which stay unchanged until each batch's forward has run (the main
    // batch runs first; a verified sequence's table is not touched again before the GDN commit;
    // run_mtp grows a table before taking its view).
    ForwardBatch& batch = batch_;
    batch.clear();
    // Spare-slot mode (--mtp-spare-slots): see below. While capturing graphs, not in the first
    // verify step of a batch size, which must commit (capture_graphs accepts every draft) so that
    // the commit graph exists for the steps that run out of spares.
    const bool use_spares = !capturing_graphs_ || capture_verify_steps_ > 0;
    bool any_verify = false;
    for (const ScheduledSeq& ss : sched.scheduled) {
        Sequence& s = *ss.seq;
        SeqSpan span;
        span.row_begin = int32_t(batch.token_ids.size());
        span.num_tokens = int32_t(ss.num_tokens);
        span.start_pos = int32_t(s.num_computed);
        span.state_slot = s.slot;
        span.block_table = s.block_table;
        if (ss.verify) {
            for (int32_t d : s.draft) QS_CHECK_MSG(d >= 0, "Engine: a draft id was not resolved before its verify");
            batch.token_ids.push_back(s.tokens.back());
            batch.token_ids.insert(batch.token_ids.end(), s.draft.begin(), s.draft.end());
            for (int64_t r = 0; r < ss.num_tokens; ++r) batch.logits_rows.push_back(span.row_begin + int32_t(r));
            span.defer_state = true;  // the accepted drafts are committed after the verdicts
            // Spare-slot mode: the state after every draft goes into a borrowed slot, taken on a
            // full acceptance (no commit); -1 when the pool is empty (that sequence commits).
            if (use_spares) span.spare_slot = cache_mgr_->borrow_spare();
            any_verify = true;
        } else {
            batch.token_ids.insert(batch.token_ids.end(), s.tokens.begin() + s.num_computed,
                                   s.tokens.begin() + s.num_computed + ss.num_tokens);
            if (s.num_computed + ss.num_tokens == int64_t(s.tokens.size()))
                batch.logits_rows.push_back(span.row_begin + ss.num_tokens - 1);
        }
        batch.seqs.push_back(span);
    }
    if (capturing_graphs_ && any_verify) ++capture_verify_steps_;
    batch.logits_on_device = true;
    span_seqs_.clear();
    for (const ScheduledSeq& ss : sched.scheduled) span_seqs_.push_back(ss.seq);
    place_images(batch, span_seqs_, /*token_offset=*/0);
    start_grammar_masks(sched);  // filled on other threads during the forward
    double t = now_seconds();
    Qwen36Model::Output out = model_->forward(batch, *cache_, /*want_hidden=*/num_spec_ > 0, std::move(forward_buf_));
    profile_.forward_s += now_seconds() - t;

    t = now_seconds();
    sample_rows(sched, out);
    profile_.sample_s += now_seconds() - t;
    emit_time_s_ = clock_();  // every token this step emits (vLLM stamps a step's outputs once)

    // Emit the picked tokens, sequence by sequence: stop checks, outputs, GDN commits and MTP rows.
    ForwardBatch& commit = commit_batch_;  // per verified sequence that accepted drafts: those rows
    commit.clear();
    commit_rows_.clear();
    committed_.clear();
    mtp_seqs_.clear();
    mtp_first_row_.clear();
    mtp_num_rows_.clear();
    mtp_last_row_.clear();
    auto add_mtp = [this](Sequence* seq, int32_t first_row, int32_t num_rows, int32_t last_row) {
        mtp_seqs_.push_back(seq);
        mtp_first_row_.push_back(first_row);
        mtp_num_rows_.push_back(num_rows);
        mtp_last_row_.push_back(last_row);
    };
    // The commit of a batch of verify spans only keeps their layout (a graph of the step's shape
    // reads the GDN stash in place); otherwise the verify spans are packed, each still q rows.
    bool all_verify = true;
    for (const ScheduledSeq& ss : sched.scheduled) all_verify = all_verify && ss.verify;
    int32_t commit_rows = 0;
    for (size_t i = 0; i < sched.scheduled.size(); ++i) {
        const ScheduledSeq& ss = sched.scheduled[i];
        Sequence& s = *ss.seq;
        const SeqSpan& span = batch.seqs[i];
        const size_t picks_begin = size_t(pick_begin_[i]), picks_end = size_t(pick_begin_[i + 1]);
        // Aborts are applied before scheduling and finished sequences leave the scheduler at once.
        QS_CHECK(s.status != SeqStatus::kFinished);
        if (!ss.verify) {
            s.num_computed += ss.num_tokens;
            cache_mgr_->after_forward(s);
            if (picks_begin < picks_end) {  // the last prompt row or a decode row: one token
                const RowPick& pick = picks_[picks_begin];
                // n > 1: the other completions share the prompt just computed (fork before the
                // parent's first token, while its pages and state are still the prompt's).
                std::vector<Sequence*> forked;
                if (pick.first_sibling_row >= 0) forked = fork_siblings(s, pick.first_sibling_row);
                append_token(s, pick.token, pick.sample_row, pending_for(s));
                // The forked completions were copied before the MTP catch-up below wrote this
                // step's rows: each runs the catch-up over the same rows (same hidden states)
                // into its own pages, with its own first token for the last row.
                for (Sequence* c : forked) add_mtp(c, span.row_begin, span.num_tokens, span.num_tokens - 1);
            }
            if (s.status != SeqStatus::kFinished) add_mtp(&s, span.row_begin, span.num_tokens, span.num_tokens - 1);
            continue;
        }
        // Verify: rows are [last token, d_1..d_k]; emit the target's tokens while drafts match
        // (sample_rows judged them; a finish cuts the run short).
        const int64_t c = s.num_computed;
        std::vector<int32_t>& draft = draft_scratch_;
        draft.swap(s.draft);  // the sequence keeps the scratch's capacity for its next draft
        s.draft.clear();
        int64_t accepted = 0;
        for (size_t k = picks_begin; k < picks_end; ++k) {
            const RowPick& pick = picks_[k];
            const size_t r = k - picks_begin;
            append_token(s, pick.token, pick.sample_row, pending_for(s));
            if (r >= draft.size()) continue;  // the bonus token
            ++mtp_proposed_[r];
            if (!pick.accepted || s.status == SeqStatus::kFinished) {
                if (pick.accepted) {
                    ++mtp_accepted_[r];
                    ++accepted;
                }
                break;
            }
            ++mtp_accepted_[r];
            ++accepted;
        }
        counters_.mtp_draft_tokens += int64_t(draft.size());
        counters_.mtp_accepted_tokens += accepted;
        // Spare-slot mode: every draft accepted (and the sequence goes on) -> the spare holds the
        // state after all the verify rows and becomes the sequence's slot; otherwise it goes back.
        const bool take_spare = span.spare_slot >= 0 && s.status != SeqStatus::kFinished &&
                                accepted == int64_t(draft.size());
        if (take_spare) {
            cache_mgr_->take_spare(s, span.spare_slot);
            ++counters_.mtp_spare_slot_swaps;
        } else if (span.spare_slot >= 0) {
            cache_mgr_->return_spare(span.spare_slot);
        }
        if (s.status == SeqStatus::kFinished) continue;
        s.num_computed = c + accepted + 1;
        committed_.push_back(&s);
        // The verify forward wrote the GDN state after its first row (the last token): commit
        // the accepted drafts, rows 1..accepted, and nothing when none was accepted. In a batch
        // of verify spans the commit span stays at the verify span's rows (a graph of the step's
        // shape reads the GDN stash in place); otherwise the spans are packed.
        if (accepted > 0 && !take_spare) {
            SeqSpan r;
            r.row_begin = all_verify ? span.row_begin + 1 : commit_rows;
            r.num_tokens = int32_t(accepted);
            r.start_pos = int32_t(c + 1);
            r.state_slot = s.slot;
            r.block_table = s.block_table;
            commit_rows = r.row_begin + r.num_tokens;
            commit.token_ids.resize(size_t(commit_rows), 0);
            std::copy(s.tokens.begin() + c + 1, s.tokens.begin() + c + 1 + accepted,
                      commit.token_ids.begin() + r.row_begin);
            commit.seqs.push_back(r);
            commit_rows_.push_back(span.row_begin);
        }
        // The MTP catch-up runs all the verify rows too (the same shape every step); the rows
        // past the kept ones write MTP keys and values that the next steps overwrite first.
        add_mtp(&s, span.row_begin, span.num_tokens, int32_t(accepted));
    }
    t = now_seconds();
    model_->commit_deferred_state(commit, commit_rows_, *cache_);
    for (Sequence* s : committed_) cache_mgr_->after_forward(*s);  // snapshots see the committed state
    profile_.forward_s += now_seconds() - t;
    run_mtp(out.device_hidden, out.num_hidden_rows);
    forward_buf_ = std::move(out);
}

void Engine::place_images(ForwardBatch& b, const std::vector<Sequence*>& seqs, int token_offset) {
    span_images_.clear();
    bool any = false;
    for (const Sequence* s : seqs) {
        span_images_.push_back(s->request->images.get());
        any = any || span_images_.back() != nullptr;
    }
    if (any) place_prompt_images(b, span_images_, token_offset);
}

void Engine::run_mtp(const float* hidden, int64_t num_hidden_rows) {
    if (num_spec_ == 0 || mtp_seqs_.empty()) return;
    // Catch-up: MTP row p (position p) reads hidden h_p and token x_{p+1}; this fills the MTP
    // layer's KV for the rows just computed and yields the first draft from the last row. The
    // hidden rows are picked by index on the backend (usually all rows in order: no gather).
    ForwardBatch& b = mtp_batch_;
    b.clear();
    mtp_hidden_rows_.clear();
    drafting_.clear();
    bool identity = true;  // rows of `hidden` used in order, all of them
    const int64_t disable_at = config_.speculative_disable_by_batch_size;
    const bool draft_now = disable_at == 0 || scheduler_->num_running() <= disable_at;
    for (size_t i = 0; i < mtp_seqs_.size(); ++i) {
        Sequence& s = *mtp_seqs_[i];
        const int32_t n = mtp_num_rows_[i], last = mtp_last_row_[i];
        const int64_t start = s.num_computed - (last + 1);
        SeqSpan span;
        span.row_begin = int32_t(b.token_ids.size());
        span.num_tokens = n;
        span.start_pos = int32_t(start);
        span.state_slot = s.slot;
        // Rows up to `last` read the next token; the rows past it (rejected drafts) any token.
        b.token_ids.insert(b.token_ids.end(), s.tokens.begin() + start + 1, s.tokens.begin() + start + 1 + last + 1);
        b.token_ids.resize(b.token_ids.size() + size_t(n - 1 - last), s.tokens.back());
        identity = identity && mtp_first_row_[i] == span.row_begin;
        for (int32_t r = 0; r < n; ++r) mtp_hidden_rows_.push_back(mtp_first_row_[i] + r);
        // Draft only for decode-ready sequences with pages for the next verify (positions up to c + k).
        // (A request with n > 1 forks at its first token, which must come from a plain row.)
        const bool fork_pending = s.request->request.params.n > 1 && !s.request->forked;
        // (A sequence with a grammar does not draft: see Sequence::matcher.)
        const bool ready = draft_now && s.num_uncomputed() == 1 && !fork_pending && !s.matcher &&
                           cache_mgr_->ensure_blocks(s, s.num_computed + num_spec_ + 1);
        span.block_table = s.block_table;  // after ensure_blocks may have grown the table
        if (ready) {
            b.logits_rows.push_back(span.row_begin + last);
            drafting_.push_back(&s);
        }
        b.seqs.push_back(span);
    }
    if (identity && b.num_tokens() == num_hidden_rows) mtp_hidden_rows_.clear();
    b.argmax_only = true;  // drafts are greedy: only the argmax of each row comes back
    b.argmax_deferred = config_.mtp_overlap && num_spec_ == 1;  // the step's last draft forward (resolve_drafts)
    b.argmax_vocab = config_.speculative_draft_vocab;
    place_images(b, mtp_seqs_, /*token_offset=*/1);
    double t = now_seconds();
    // With k > 1 the output carries the MTP hidden at the drafting rows, in drafting_ order.
    Qwen36Model::Output out = model_->mtp_forward(b, hidden, num_hidden_rows, mtp_hidden_rows_, *cache_,
                                                 /*want_hidden=*/num_spec_ > 1,
                                                 std::move(mtp_buf_));
    profile_.forward_s += now_seconds() - t;
    t = now_seconds();
    const bool deferred = out.argmax_pending;
    for (size_t d = 0; d < drafting_.size(); ++d) drafting_[d]->draft.assign(1, deferred ? kPendingDraft : out.argmax[d]);
    profile_.sample_s += now_seconds() - t;
    // Further drafts: one MTP row per sequence, fed its own output hidden and last draft.
    for (int64_t step = 2; step <= num_spec_ && !drafting_.empty(); ++step) {
        ForwardBatch& db = mtp_step_batch_;
        db.clear();
        for (size_t d = 0; d < drafting_.size(); ++d) {
            Sequence& s = *drafting_[d];
            SeqSpan span;
            span.row_begin = int32_t(d);
            span.num_tokens = 1;
            span.start_pos = int32_t(s.num_computed + step - 2);
            span.state_slot = s.slot;
            span.block_table = s.block_table;
            db.token_ids.push_back(s.draft.back());
            db.logits_rows.push_back(int32_t(d));
            db.seqs.push_back(span);
        }
        db.argmax_only = true;
        db.argmax_deferred = config_.mtp_overlap && step == num_spec_;
        db.argmax_vocab = config_.speculative_draft_vocab;
        place_images(db, drafting_, /*token_offset=*/1);
        t = now_seconds();
        Qwen36Model::Output o =
            model_->mtp_forward(db, out.device_hidden, out.num_hidden_rows, /*hidden_rows=*/{}, *cache_,
                               /*want_hidden=*/true, std::move(mtp_step_buf_));
        profile_.forward_s += now_seconds() - t;
        t = now_seconds();
        const bool last_deferred = o.argmax_pending;
        for (size_t d = 0; d < drafting_.size(); ++d)
            drafting_[d]->draft.push_back(last_deferred ? kPendingDraft : o.argmax[d]);
        profile_.sample_s += now_seconds() - t;
        out.device_hidden = o.device_hidden;  // this step's hidden feeds the next (read before written)
        out.num_hidden_rows = o.num_hidden_rows;
        mtp_step_buf_ = std::move(o);
        if (last_deferred) {
            pending_drafters_ = drafting_;
            pending_draft_out_ = &mtp_step_buf_;
        }
    }
    mtp_buf_ = std::move(out);
    if (deferred) {
        pending_drafters_ = drafting_;
        pending_draft_out_ = &mtp_buf_;
    }
}

void Engine::resolve_drafts() {
    if (pending_drafters_.empty()) return;
    const double t = now_seconds();
    Qwen36Model::Output& o = *pending_draft_out_;
    model_->take_argmax(o);
    QS_CHECK(o.argmax.size() == pending_drafters_.size());
    for (size_t d = 0; d < pending_drafters_.size(); ++d) {
        Sequence& s = *pending_drafters_[d];
        if (s.status == SeqStatus::kFinished || s.draft.empty() || s.draft.back() != kPendingDraft) continue;
        s.draft.back() = o.argmax[d];
    }
    pending_drafters_.clear();
    pending_draft_out_ = nullptr;
    profile_.forward_s += now_seconds() - t;  // the wait for the MTP head's end
}

}  // namespace qs

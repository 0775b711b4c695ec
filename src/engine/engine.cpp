// Engine: submission, the loop, and what happens around one forward (see engine.h).
#include "engine/engine.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>

#include "core/log.h"
#include "core/timer.h"
#include "engine/sample_rows.h"

namespace qs {

namespace {
constexpr double kWedgedAfterS = 120.0;  // no loop progress for this long: unhealthy
}  // namespace

// What a sequence produced during one step; becomes one RequestOutput.
struct Engine::PendingOutput {
    std::vector<int32_t> token_ids;
    std::string text;
    std::vector<TokenLogprob> logprobs;
    std::vector<std::vector<TokenLogprob>> top_logprobs;
    FinishReason finish_reason = FinishReason::kNone;
    std::string stop_reason;
};

Result<std::unique_ptr<Engine>> Engine::create(const ModelWeights& weights, Ops& ops, const EngineConfig& config,
                                               std::shared_ptr<const TextDecoder> decoder) {
    QS_RETURN_IF_ERROR(config.validate());
    if (config.num_speculative_tokens > 0 && !weights.mtp.present)
        return invalid_argument("num_speculative_tokens > 0 needs a checkpoint with an MTP block (mtp.*)");
    QS_ASSIGN_OR_RETURN(CapacityPlan plan, plan_capacity(weights.config, config, weights.mtp.present));
    return std::unique_ptr<Engine>(new Engine(weights, ops, config, plan, std::move(decoder)));
}

Engine::Engine(const ModelWeights& weights, Ops& ops, const EngineConfig& config, const CapacityPlan& plan,
               std::shared_ptr<const TextDecoder> decoder)
    : weights_(weights),
      ops_(ops),
      config_(config),
      plan_(plan),
      decoder_(std::move(decoder)),
      model_(weights, ops),
      num_spec_(config.num_speculative_tokens) {
    CacheGeometry geometry = CacheGeometry::for_model(weights.config, plan.num_kv_blocks, config.kv_block_size,
                                                      plan.total_state_slots(), num_spec_ > 0, config.kv_cache_dtype);
    geometry.state_bf16 = config.gdn_state_bf16;
    cache_ = ops.make_cache(geometry);
    cache_mgr_ = std::make_unique<CacheManager>(*cache_, plan_, config_);
    scheduler_ = std::make_unique<Scheduler>(config_, *cache_mgr_);
    mtp_proposed_.assign(size_t(num_spec_), 0);
    mtp_accepted_.assign(size_t(num_spec_), 0);
    heartbeat_ = now_seconds();
}

Engine::~Engine() { stop(); }

Status Engine::submit(GenerationRequest request, OutputSink sink) {
    QS_RETURN_IF_ERROR(request.params.validate());
    const int64_t n = int64_t(request.prompt_ids.size());
    if (request.id.empty()) return invalid_argument("request id must not be empty");
    if (n == 0) return invalid_argument("prompt is empty");
    for (int64_t i = 0; i < n; ++i)
        if (request.prompt_ids[size_t(i)] < 0 || request.prompt_ids[size_t(i)] >= weights_.config.vocab_size)
            return invalid_argument(fmt::format("prompt token {} at index {} is outside the vocabulary (vocab_size {})",
                                                request.prompt_ids[size_t(i)], i, weights_.config.vocab_size));
    for (const TokenBias& b : request.params.logit_bias)
        if (b.token >= weights_.config.vocab_size)
            return invalid_argument(fmt::format("logit_bias token {} is outside the vocabulary (vocab_size {})", b.token,
                                                weights_.config.vocab_size));
    if (n >= plan_.max_model_len)
        return invalid_argument(fmt::format("prompt has {} tokens but max_model_len is {} (the prompt and at least one "
                                            "generated token must fit)",
                                            n, plan_.max_model_len));
    if (!request.params.stop.empty() && !decoder_)
        return invalid_argument("stop strings need a tokenizer, and this engine has none");
    std::lock_guard<std::mutex> lock(inbox_mu_);
    if (live_ids_.count(request.id)) return invalid_argument("duplicate request id '" + request.id + "'");
    int64_t running;
    {
        std::lock_guard<std::mutex> s(stats_mu_);
        running = stats_.num_running;
    }
    if (int64_t(live_ids_.size()) - running >= config_.max_waiting)
        return Status(ErrorKind::kResourceExhausted,
                      fmt::format("the waiting queue is full ({} requests); retry later", config_.max_waiting));
    live_ids_[request.id] = true;
    inbox_.push_back({Command::kSubmit, std::move(request), std::move(sink), {}});
    inbox_cv_.notify_one();
    return Status::ok();
}

void Engine::abort(const std::string& request_id) {
    std::lock_guard<std::mutex> lock(inbox_mu_);
    if (!live_ids_.count(request_id)) return;
    inbox_.push_back({Command::kAbort, {}, {}, request_id});
    inbox_cv_.notify_one();
}

EngineStats Engine::stats() const {
    std::lock_guard<std::mutex> lock(stats_mu_);
    EngineStats s = stats_;
    s.last_step_age_s = now_seconds() - heartbeat_.load();
    return s;
}

bool Engine::healthy() const { return now_seconds() - heartbeat_.load() < kWedgedAfterS; }

void Engine::start() {
    if (running_.exchange(true)) return;
    thread_ = std::thread([this] {
        while (running_.load()) {
            heartbeat_ = now_seconds();
            if (step()) continue;
            std::unique_lock<std::mutex> lock(inbox_mu_);
            inbox_cv_.wait_for(lock, std::chrono::milliseconds(100),
                               [this] { return !inbox_.empty() || !running_.load(); });
        }
    });
}

void Engine::stop() {
    if (!running_.exchange(false)) return;
    inbox_cv_.notify_all();
    if (thread_.joinable()) thread_.join();
}

void Engine::run_until_idle() {
    for (;;) {
        step();
        std::lock_guard<std::mutex> lock(inbox_mu_);
        if (inbox_.empty() && live_ids_.empty()) return;
    }
}

void Engine::drain_inbox() {
    {
        std::lock_guard<std::mutex> lock(inbox_mu_);
        if (inbox_.empty()) return;
        drained_.swap(inbox_);
    }
    for (Command& c : drained_) {
        if (c.kind == Command::kSubmit) admit(std::move(c));
        else abort_request(c.abort_id);
    }
    drained_.clear();
}

void Engine::admit(Command&& c) {
    auto rs = std::make_unique<RequestState>();
    rs->request = std::move(c.request);
    rs->sink = std::move(c.sink);
    auto seq = std::make_unique<Sequence>();
    seq->id = next_seq_id_++;
    seq->request = rs.get();
    seq->index = 0;
    seq->tokens = rs->request.prompt_ids;
    seq->num_prompt = int64_t(seq->tokens.size());
    seq->sample_key = sampling_key(rs->request.params, 0);
    if (decoder_) seq->decoder = decoder_->start();
    seq->stop = std::make_unique<StopChecker>(rs->request.params.stop, rs->request.params.include_stop_str_in_output);
    counters_.num_prompt_tokens_total += seq->num_prompt;
    scheduler_->add_waiting(seq.get());
    rs->seqs.push_back(std::move(seq));
    const std::string id = rs->request.id;
    requests_[id] = std::move(rs);
}

void Engine::abort_request(const std::string& id) {
    auto it = requests_.find(id);
    if (it == requests_.end()) return;
    for (auto& s : it->second->seqs) {
        if (s->status == SeqStatus::kFinished) continue;
        finish(*s, FinishReason::kAbort, pending_for(*s));
    }
    // Completions not yet forked will never exist: count them as finished.
    if (!it->second->forked) {
        it->second->num_finished = it->second->request.params.n;
        it->second->forked = true;
    }
}

void Engine::append_token(Sequence& s, int32_t token, int32_t sample_row, PendingOutput& out) {
    const SamplingParams& p = s.request->request.params;
    s.tokens.push_back(token);
    ++counters_.num_completion_tokens_total;
    out.token_ids.push_back(token);
    if (p.logprobs >= 0) {
        const size_t at = size_t(sample_row);
        out.logprobs.push_back({token, sampled_.logprob[at]});
        std::vector<TokenLogprob> top(size_t(p.logprobs));
        for (size_t i = 0; i < top.size(); ++i)
            top[i] = {sampled_.top_ids[at * kMaxTopLogprobs + i], sampled_.top_logprobs[at * kMaxTopLogprobs + i]};
        out.top_logprobs.push_back(std::move(top));
    }
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
        if (decoder_) child->decoder = decoder_->start();
        child->stop = std::make_unique<StopChecker>(rs.request.params.stop, rs.request.params.include_stop_str_in_output);
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

bool Engine::step() {
    const double t0 = now_seconds();
    drain_inbox();
    SchedulerOutput sched;
    if (!requests_.empty()) sched = scheduler_->schedule();
    const double t1 = now_seconds();
    if (!sched.scheduled.empty()) {
        run_batch(sched);
        ++counters_.steps_total;
    }
    flush_outputs();
    publish_stats();
    if (!sched.scheduled.empty()) {
        ++profile_.steps;
        profile_.schedule_s += t1 - t0;
        profile_.total_s += now_seconds() - t0;
    }
    return !sched.scheduled.empty();
}

void Engine::run_batch(const SchedulerOutput& sched) {
    // The batches are members reused from step to step; their block tables are views of the
    // sequences' own tables, which stay unchanged until each batch's forward has run (the main
    // batch runs first; a verified sequence's table is not touched again before the GDN commit;
    // run_mtp grows a table before taking its view).
    ForwardBatch& batch = batch_;
    batch.clear();
    for (const ScheduledSeq& ss : sched.scheduled) {
        Sequence& s = *ss.seq;
        SeqSpan span;
        span.row_begin = int32_t(batch.token_ids.size());
        span.num_tokens = int32_t(ss.num_tokens);
        span.start_pos = int32_t(s.num_computed);
        span.state_slot = s.slot;
        span.block_table = s.block_table;
        if (ss.verify) {
            batch.token_ids.push_back(s.tokens.back());
            batch.token_ids.insert(batch.token_ids.end(), s.draft.begin(), s.draft.end());
            for (int64_t r = 0; r < ss.num_tokens; ++r) batch.logits_rows.push_back(span.row_begin + int32_t(r));
            span.defer_state = true;  // the accepted prefix is committed after the verdicts
        } else {
            batch.token_ids.insert(batch.token_ids.end(), s.tokens.begin() + s.num_computed,
                                   s.tokens.begin() + s.num_computed + ss.num_tokens);
            if (s.num_computed + ss.num_tokens == int64_t(s.tokens.size()))
                batch.logits_rows.push_back(span.row_begin + ss.num_tokens - 1);
        }
        batch.seqs.push_back(span);
    }
    batch.logits_on_device = true;
    double t = now_seconds();
    Qwen36Model::Output out = model_.forward(batch, *cache_, /*want_hidden=*/num_spec_ > 0, std::move(forward_buf_));
    profile_.forward_s += now_seconds() - t;

    t = now_seconds();
    sample_rows(sched, out);
    profile_.sample_s += now_seconds() - t;

    // Emit the picked tokens, sequence by sequence: stop checks, outputs, GDN commits and MTP rows.
    ForwardBatch& commit = commit_batch_;  // per verified sequence: its accepted prefix
    commit.clear();
    commit_rows_.clear();
    committed_.clear();
    mtp_seqs_.clear();
    mtp_first_row_.clear();
    mtp_num_rows_.clear();
    auto add_mtp = [this](Sequence* seq, int32_t first_row, int32_t num_rows) {
        mtp_seqs_.push_back(seq);
        mtp_first_row_.push_back(first_row);
        mtp_num_rows_.push_back(num_rows);
    };
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
                for (Sequence* c : forked) add_mtp(c, span.row_begin, span.num_tokens);
            }
            if (s.status != SeqStatus::kFinished) add_mtp(&s, span.row_begin, span.num_tokens);
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
        if (s.status == SeqStatus::kFinished) continue;
        s.num_computed = c + accepted + 1;
        // The verify forward left the GDN state where it was: commit the kept rows.
        SeqSpan r;
        r.row_begin = int32_t(commit.token_ids.size());
        r.num_tokens = int32_t(accepted + 1);
        r.start_pos = int32_t(c);
        r.state_slot = s.slot;
        r.block_table = s.block_table;
        commit.token_ids.insert(commit.token_ids.end(), s.tokens.begin() + c, s.tokens.begin() + c + accepted + 1);
        commit.seqs.push_back(r);
        commit_rows_.push_back(span.row_begin);
        committed_.push_back(&s);
        add_mtp(&s, span.row_begin, int32_t(accepted + 1));
    }
    t = now_seconds();
    model_.commit_deferred_state(commit, commit_rows_, *cache_);
    for (Sequence* s : committed_) cache_mgr_->after_forward(*s);  // snapshots see the committed state
    profile_.forward_s += now_seconds() - t;
    run_mtp(out.device_hidden, out.num_hidden_rows);
    forward_buf_ = std::move(out);
}

void Engine::sample_rows(const SchedulerOutput& sched, const Qwen36Model::Output& out) {
    // One SampleRow per draw: the last row of a prompt or a decode row, every row of a verify
    // (its drafts judged on the backend), and the first tokens of a fork's siblings (from the
    // parent's row). Each draw's noise is keyed by (sequence key, completion position), so the
    // tokens do not depend on the batch, and rows past a rejected draft are simply not used.
    const int64_t V = weights_.config.vocab_size, bs = cache_mgr_->block_size();
    const std::vector<int64_t>& eos = weights_.config.eos_token_ids;
    SamplingBatch& b = sampling_;
    b.clear();
    picks_.clear();
    pick_begin_.clear();
    int32_t logits_at = 0;
    for (const ScheduledSeq& ss : sched.scheduled) {
        Sequence& s = *ss.seq;
        const SamplingParams& p = s.request->request.params;
        pick_begin_.push_back(int32_t(picks_.size()));
        if (!ss.verify) {
            if (s.num_computed + ss.num_tokens != int64_t(s.tokens.size())) continue;  // a prefill chunk
            SampleRowSpec spec;
            spec.logits_row = logits_at++;
            spec.position = int64_t(s.tokens.size()) - 1;
            spec.draw = s.num_output();
            const int32_t row = int32_t(b.rows.size());
            add_sample_row(b, s, s.sample_key, spec, eos, bs);
            int32_t first_sibling = -1;
            if (p.n > 1 && s.index == 0 && !s.request->forked && s.num_output() == 0) {
                first_sibling = int32_t(b.rows.size());
                spec.adjusts_row = false;  // same history and parameters: the parent's adjustments hold
                for (int32_t i = 1; i < int32_t(p.n); ++i) add_sample_row(b, s, sampling_key_for(s, i), spec, eos, bs);
            }
            picks_.push_back({0, row, false, first_sibling});
            continue;
        }
        for (int32_t r = 0; r < ss.num_tokens; ++r) {
            SampleRowSpec spec;
            spec.logits_row = logits_at + r;
            spec.position = s.num_computed + r;
            spec.draw = s.num_output() + r;
            spec.draft = size_t(r) < s.draft.size() ? s.draft[size_t(r)] : -1;  // the last row: the bonus token
            picks_.push_back({0, int32_t(b.rows.size()), false, -1});
            add_sample_row(b, s, s.sample_key, spec, eos, bs);
        }
        logits_at += int32_t(ss.num_tokens);
    }
    pick_begin_.push_back(int32_t(picks_.size()));
    QS_CHECK(out.device_logits != nullptr || b.rows.empty());
    if (!b.rows.empty()) ops_.sample(out.device_logits, V, b, *cache_, sampled_);
    for (RowPick& pick : picks_) {
        pick.token = sampled_.token[size_t(pick.sample_row)];
        pick.accepted = sampled_.accepted[size_t(pick.sample_row)] != 0;
    }
    if (config_.benchmark_mtp_acceptance >= 0.0) force_acceptance();
}

void Engine::force_acceptance() {
    // Benchmark only: a draft row accepts its draft with the configured probability, decided by
    // a hash of (sequence key, position), and emits the draft then; a refused draft emits what
    // the target drew. Outputs are no longer the model's.
    const uint64_t threshold = uint64_t(config_.benchmark_mtp_acceptance * 18446744073709551615.0);
    for (RowPick& pick : picks_) {
        const SampleRow& r = sampling_.rows[size_t(pick.sample_row)];
        if (r.draft < 0) continue;
        uint64_t h = (r.seed ^ (r.draw * 0x9e3779b97f4a7c15ull)) + 0x632be59bd9b4e019ull;
        h = (h ^ (h >> 30)) * 0xbf58476d1ce4e5b9ull;
        h = (h ^ (h >> 27)) * 0x94d049bb133111ebull;
        h ^= h >> 31;
        pick.accepted = config_.benchmark_mtp_acceptance >= 1.0 || h < threshold;
        if (pick.accepted) pick.token = r.draft;
    }
}

uint64_t Engine::sampling_key_for(const Sequence& parent, int32_t completion_index) {
    // Seeded: a pure function of the request (a sibling that cannot fork now and recomputes its
    // prompt later draws its first token again with the same key). Unseeded: one random key per
    // sibling, made once.
    RequestState& rs = *parent.request;
    if (rs.sibling_keys.empty())
        for (int32_t i = 0; i < int32_t(rs.request.params.n); ++i)
            rs.sibling_keys.push_back(i == 0 ? parent.sample_key : sampling_key(rs.request.params, i));
    return rs.sibling_keys[size_t(completion_index)];
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
    for (size_t i = 0; i < mtp_seqs_.size(); ++i) {
        Sequence& s = *mtp_seqs_[i];
        const int32_t n = mtp_num_rows_[i];
        const int64_t start = s.num_computed - n;
        SeqSpan span;
        span.row_begin = int32_t(b.token_ids.size());
        span.num_tokens = n;
        span.start_pos = int32_t(start);
        span.state_slot = s.slot;
        b.token_ids.insert(b.token_ids.end(), s.tokens.begin() + start + 1, s.tokens.begin() + start + 1 + n);
        identity = identity && mtp_first_row_[i] == span.row_begin;
        for (int32_t r = 0; r < n; ++r) mtp_hidden_rows_.push_back(mtp_first_row_[i] + r);
        // Draft only for decode-ready sequences with pages for the next verify (positions up to c + k).
        // (A request with n > 1 forks at its first token, which must come from a plain row.)
        const bool fork_pending = s.request->request.params.n > 1 && !s.request->forked;
        const bool ready = s.num_uncomputed() == 1 && !fork_pending &&
                           cache_mgr_->ensure_blocks(s, s.num_computed + num_spec_ + 1);
        span.block_table = s.block_table;  // after ensure_blocks may have grown the table
        if (ready) {
            b.logits_rows.push_back(span.row_begin + n - 1);
            drafting_.push_back(&s);
        }
        b.seqs.push_back(span);
    }
    if (identity && b.num_tokens() == num_hidden_rows) mtp_hidden_rows_.clear();
    b.argmax_only = true;  // drafts are greedy: only the argmax of each row comes back
    double t = now_seconds();
    // With k > 1 the output carries the MTP hidden at the drafting rows, in drafting_ order.
    Qwen36Model::Output out = model_.mtp_forward(b, hidden, num_hidden_rows, mtp_hidden_rows_, *cache_,
                                                 /*want_hidden=*/num_spec_ > 1,
                                                 std::move(mtp_buf_));
    profile_.forward_s += now_seconds() - t;
    t = now_seconds();
    for (size_t d = 0; d < drafting_.size(); ++d) drafting_[d]->draft.assign(1, out.argmax[d]);
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
        t = now_seconds();
        Qwen36Model::Output o =
            model_.mtp_forward(db, out.device_hidden, out.num_hidden_rows, /*hidden_rows=*/{}, *cache_,
                               /*want_hidden=*/true, std::move(mtp_step_buf_));
        profile_.forward_s += now_seconds() - t;
        t = now_seconds();
        for (size_t d = 0; d < drafting_.size(); ++d) drafting_[d]->draft.push_back(o.argmax[d]);
        profile_.sample_s += now_seconds() - t;
        out.device_hidden = o.device_hidden;  // this step's hidden feeds the next (read before written)
        out.num_hidden_rows = o.num_hidden_rows;
        mtp_step_buf_ = std::move(o);
    }
    mtp_buf_ = std::move(out);
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
            ro.num_prompt_tokens = seq->num_prompt;
            ro.num_cached_prompt_tokens = seq->num_cached_prompt;
            ro.num_completion_tokens = seq->num_output();
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
    s.num_running = scheduler_->num_running();
    s.num_waiting = scheduler_->num_waiting();
    s.num_preemptions_total = scheduler_->num_preemptions_total();
    const BlockPool& pool = cache_mgr_->pool();
    s.kv_usage = pool.num_blocks() ? double(pool.num_in_use()) / double(pool.num_blocks()) : 0.0;
    s.state_slot_usage = double(cache_mgr_->num_slots_in_use()) / double(cache_mgr_->num_running_slots());
    std::lock_guard<std::mutex> lock(stats_mu_);
    stats_ = s;
}

}  // namespace qs

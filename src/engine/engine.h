// Engine: the serving loop. One thread owns the model, the caches and the scheduler; callers on
// any thread submit and abort through a locked inbox that the loop drains between steps (no lock
// is held across a forward). Each step: schedule, one forward over the batch, sample / verify MTP
// drafts (rolling GDN state back on rejection), detokenize, stop checks, outputs to the
// per-request sinks, then the MTP draft steps for the next verify. step() can also be driven
// directly (no thread) for deterministic tests.
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <unordered_map>

#include "backend/ops.h"
#include "engine/cache_manager.h"
#include "engine/engine_api.h"
#include "engine/engine_config.h"
#include "engine/scheduler.h"
#include "engine/text_decoder.h"
#include "grammar/bitmask_filler.h"
#include "model/model_runner.h"
#include "model/qwen36.h"

namespace qs {

// Where the engine thread's time went, cumulative seconds over step() calls. Bookkeeping (what
// the engine itself costs per step) = total - forward - sample.
struct EngineProfile {
    int64_t steps = 0;        // steps that ran a batch
    double total_s = 0.0;     // whole step() calls that ran a batch
    double schedule_s = 0.0;  // inbox drain + Scheduler::schedule
    double forward_s = 0.0;   // model forwards: target, GDN commits of verified drafts, MTP drafts
    double sample_s = 0.0;    // sampling, draft verification, draft argmax (CPU, over the vocabulary)
};

// Progress of Engine::capture_graphs, reported after each batch size.
struct GraphCaptureProgress {
    int64_t done = 0, total = 0;  // batch sizes captured so far, of all
    int64_t batch_size = 0;       // sequences of the step that captured it (a full batch pads up)
};

class Engine final : public EngineApi {
public:
    // `decoder` may be null: outputs then carry token ids only and stop strings are rejected.
    static Result<std::unique_ptr<Engine>> create(const ModelWeights& weights, Ops& ops, const EngineConfig& config,
                                                  std::shared_ptr<const TextDecoder> decoder);
    // The same over any runner (a tensor-parallel group: model/tensor_parallel_runner.h); `weights`
    // are the whole model's (its config, MTP block and vision tower).
    static Result<std::unique_ptr<Engine>> create(const ModelWeights& weights, std::unique_ptr<ModelRunner> runner,
                                                  const EngineConfig& config,
                                                  std::shared_ptr<const TextDecoder> decoder);
    ~Engine() override;

    Status submit(GenerationRequest request, OutputSink sink) override;
    void abort(const std::string& request_id) override;
    EngineStats stats() const override;
    bool healthy() const override;
    int64_t max_model_len() const override { return plan_.max_model_len; }

    // Captures the backend's CUDA graphs for every batch size it replays (Ops::graph_batch_sizes,
    // those a step of at most max_num_seqs sequences can be padded to), so no request pays a
    // capture: per size, largest first, that many (at most max_num_seqs)
    // one-token internal requests run a few steps (plain decode, or with MTP the verify, commit,
    // catch-up and draft steps), then the counters, the prefix cache and the pages are as before.
    // Before start() only. Returns the number of sizes (0 where the backend has no graphs).
    int64_t capture_graphs(const std::function<void(const GraphCaptureProgress&)>& on_progress = {});
    // Runs the loop on its own thread until stop().
    void start();
    void stop();
    // One iteration (drain inbox, schedule, forward, outputs). Returns false when there was
    // nothing to do. Only when the loop thread is not running.
    bool step();
    // Steps until no request is left (tests, batch CLI).
    void run_until_idle();
    // Test hook (watchdog tests, serve's --debug-engine-stall-*): called on the engine thread in
    // every step that has a batch, before its forward, with the number of such steps run so
    // far; a hook that blocks stalls the loop. Set before start().
    void set_step_hook(std::function<void(int64_t)> hook) { step_hook_ = std::move(hook); }
    // Test hook: the clock of the request timings (RequestTiming; default now_seconds). submit
    // reads it on the caller's thread, the steps on the engine thread. Set before any submit.
    void set_clock(std::function<double()> clock) { clock_ = std::move(clock); }

    const CapacityPlan& capacity() const { return plan_; }
    const EngineConfig& config() const { return config_; }
    // Accounting for tests: pages and running slots owned by sequences, live requests.
    int64_t num_blocks_in_use() const { return cache_mgr_->pool().num_in_use(); }
    int64_t num_slots_in_use() const { return cache_mgr_->num_slots_in_use(); }
    int64_t num_live_requests() const { return int64_t(requests_.size()); }
    void clear_prefix_cache() { cache_mgr_->clear_prefix_cache(); }
    // Per draft position i (0-based): drafts proposed and accepted so far.
    const std::vector<int64_t>& mtp_proposed_by_position() const { return mtp_proposed_; }
    const std::vector<int64_t>& mtp_accepted_by_position() const { return mtp_accepted_; }
    const EngineProfile& profile() const { return profile_; }
    void reset_profile() { profile_ = {}; }

private:
    Engine(const ModelWeights& weights, std::unique_ptr<ModelRunner> runner, const EngineConfig& config,
           const CapacityPlan& plan, std::shared_ptr<const TextDecoder> decoder);

    struct Command {
        enum Kind { kSubmit, kAbort } kind;
        GenerationRequest request;
        OutputSink sink;
        std::string abort_id;
        double arrival_s = -1;  // kSubmit: clock_() at submit
        std::shared_ptr<const PromptImages> images = nullptr;  // made by submit for a request with images
        std::vector<int32_t> cache_key = {};
    };
    // What a sequence produced during one step; becomes one RequestOutput.
    struct PendingOutput {
        std::vector<int32_t> token_ids;
        std::string text;
        std::vector<TokenLogprob> logprobs;
        std::vector<std::vector<TokenLogprob>> top_logprobs;
        FinishReason finish_reason = FinishReason::kNone;
        std::string stop_reason;
        std::string error;  // with kError
    };

    void drain_inbox();
    void admit(Command&& c);
    void abort_request(const std::string& id);
    void run_batch(const SchedulerOutput& sched);
    // Draws every token this step needs on the backend (Ops::sample over the forward's device
    // logits) into picks_ and sampled_.
    void sample_rows(const SchedulerOutput& sched, const Qwen36Model::Output& out);
    // --benchmark-mtp-acceptance (benchmark only), or capture_graphs' internal requests (every
    // draft, so the step after a verify commits and its graph is captured): overrides the draft
    // verdicts of picks_ with acceptance probability p.
    void force_acceptance(double p);
    // The sampling key of completion `completion_index` of parent's request.
    uint64_t sampling_key_for(const Sequence& parent, int32_t completion_index);
    // Appends `token` (drawn by sampled_ row `sample_row`) to the sequence, detokenizes, checks
    // stops.
    void append_token(Sequence& s, int32_t token, int32_t sample_row, PendingOutput& out);
    void finish(Sequence& s, FinishReason reason, PendingOutput& out, const std::string& stop_reason = "");
    // Structured outputs (engine_grammar.cpp). A matcher for a request's grammar (stop tokens:
    // the EOS ids and the request's stop_token_ids).
    std::unique_ptr<grammar::GrammarMatcher> make_matcher(const GenerationRequest& r) const;
    // Reserves a row of sampling_.bitmask for s's mask of allowed next tokens; returns it, or -1
    // when s is not constrained at this step.
    int32_t add_grammar_mask(Sequence& s);
    // Before the step's forward: clears sampling_, reserves the mask rows of the scheduled
    // sequences that draw (mask_row_of_) and starts filling them on mask_filler_'s threads, so
    // the fill overlaps the forward (the matchers and rows are not touched until the finish).
    // finish_grammar_masks waits for them (the engine thread joins in).
    void start_grammar_masks(const SchedulerOutput& sched);
    void finish_grammar_masks();
    // Advances s's grammar by the token just appended (drawn by sampled_ row `sample_row`);
    // false when that finished s (the grammar terminated, or refused the token). A token the
    // row's mask allowed is only checked against the mask here: its accept waits for the
    // sequence's next mask fill (GrammarMatcher::accept_later), on the filler's threads.
    bool advance_grammar(Sequence& s, int32_t token, int32_t sample_row, PendingOutput& out);
    // Returns the completions forked into the running set (they share the parent's rows this
    // step); their first tokens are sampled_ rows first_sibling_row.. (one per sibling).
    std::vector<Sequence*> fork_siblings(Sequence& parent, int32_t first_sibling_row);
    // The MTP catch-up over mtp_seqs_ (rows of the target forward's `hidden` given by
    // mtp_first_row_ / mtp_num_rows_; the draft comes from row mtp_last_row_ of each) and the
    // draft steps for the next verify.
    void run_mtp(const float* hidden, int64_t num_hidden_rows);
    // The last draft forward of a step leaves its argmax in flight (ForwardBatch::argmax_deferred)
    // and its drafting sequences hold kPendingDraft in their last draft slot: host work (the
    // outputs, the next schedule) runs while the GPU finishes the MTP head. resolve_drafts, in
    // the next step() right after scheduling (before any sequence can be destroyed, and before
    // any draft value is read), waits for the ids and fills them in; a sequence whose draft was
    // dropped meanwhile (preempted, no room, aborted) is skipped.
    void resolve_drafts();
    static constexpr int32_t kPendingDraft = -2;
    // Images: embeddings and M-RoPE positions for the spans of `b` whose sequence (seqs[i] is span
    // i's) has images (model/prompt_images.h; token_offset 1 for MTP batches).
    void place_images(ForwardBatch& b, const std::vector<Sequence*>& seqs, int token_offset);
    PendingOutput& pending_for(Sequence& s);
    void flush_outputs();
    void publish_stats();

    const ModelWeights& weights_;
    std::vector<Sequence*> span_seqs_;                  // place_images' scratch
    std::vector<const PromptImages*> span_images_;
    std::unique_ptr<ModelRunner> model_;  // the forwards, draws and cache (one backend or a group)
    EngineConfig config_;
    CapacityPlan plan_;
    std::shared_ptr<const TextDecoder> decoder_;
    std::unique_ptr<ModelCache> cache_;
    std::unique_ptr<CacheManager> cache_mgr_;
    std::unique_ptr<Scheduler> scheduler_;
    int64_t num_spec_;  // MTP proposals per step (0 if the model has no MTP block)
    bool capturing_graphs_ = false;  // capture_graphs is stepping its internal requests
    // Verify steps run so far for the batch size being captured: the first borrows no MTP spare
    // slot (so the commit graph is captured), the later ones do (the spare-slot verify graph).
    int64_t capture_verify_steps_ = 0;

    // Engine-thread state.
    std::unordered_map<std::string, std::unique_ptr<RequestState>> requests_;
    int64_t next_seq_id_ = 0;
    // This step's outputs: pending_[i] belongs to pending_seqs_[i] (= its Sequence::pending_index);
    // the vectors keep their capacity from step to step.
    std::vector<PendingOutput> pending_;
    std::vector<Sequence*> pending_seqs_;
    std::vector<int64_t> mtp_proposed_, mtp_accepted_;
    EngineStats counters_;
    EngineProfile profile_;
    // Forward outputs kept between steps so their [rows, vocab] buffers are reused.
    Qwen36Model::Output forward_buf_{}, mtp_buf_{}, mtp_step_buf_{};
    // Per-step scratch, cleared and refilled every step (capacity kept: no allocation per step).
    ForwardBatch batch_, commit_batch_, mtp_batch_, mtp_step_batch_;
    std::vector<int32_t> commit_rows_;  // commit_batch_ span i: first row of its verify span in batch_
    std::vector<Sequence*> committed_;  // the sequences of commit_batch_
    std::vector<Sequence*> mtp_seqs_;   // sequences for this step's MTP catch-up
    std::vector<int32_t> mtp_first_row_, mtp_num_rows_;  // their rows in the target batch
    std::vector<int32_t> mtp_last_row_;  // of those rows, the last kept one (a verify's rows past it are not)
    std::vector<int32_t> mtp_hidden_rows_;  // target row of each catch-up row
    std::vector<Sequence*> drafting_;   // sequences drafting for the next verify
    std::vector<int32_t> draft_scratch_;  // the draft being verified
    std::vector<Sequence*> pending_drafters_;  // resolve_drafts: sequence d takes argmax d
    Qwen36Model::Output* pending_draft_out_ = nullptr;  // the Output whose argmax is in flight
    struct RowPick {
        int32_t token;              // drawn (on a draft row: the draft when accepted)
        int32_t sample_row;         // its row of sampling_ / sampled_
        bool accepted;              // draft rows: the draft was accepted
        int32_t first_sibling_row;  // a fork point: the siblings' first draws, else -1
    };
    std::unique_ptr<grammar::BitmaskFiller> mask_filler_;  // made at the first constrained step
    std::vector<std::pair<Sequence*, int32_t>> mask_rows_;  // this step's reserved mask rows
    std::vector<grammar::MaskJob> mask_jobs_;
    std::vector<int32_t> mask_row_of_;  // scheduled sequence i: its mask row, or -1
    std::vector<int64_t> mask_allowed_;  // mask row r: its allowed tokens (the fill's count)
    SamplingBatch sampling_;           // this step's draws
    SampleOutput sampled_;             // and what they drew
    std::vector<RowPick> picks_;       // this step's tokens, grouped by scheduled sequence
    std::vector<int32_t> pick_begin_;  // scheduled sequence i: picks_[pick_begin_[i], pick_begin_[i + 1])
    std::deque<Command> drained_;         // the inbox taken by drain_inbox (a member: a fresh deque allocates)
    std::function<void(int64_t)> step_hook_;
    std::function<double()> clock_;
    double emit_time_s_ = -1;  // this step's output time (clock_() after the forward): token times

    // Shared with other threads.
    mutable std::mutex inbox_mu_;
    std::condition_variable inbox_cv_;
    std::deque<Command> inbox_;
    int64_t inbox_waiting_ = 0;   // submits in the inbox (counted against max_waiting)
    std::unordered_map<std::string, bool> live_ids_;  // submitted and not yet finished
    mutable std::mutex stats_mu_;
    EngineStats stats_;
    std::atomic<double> heartbeat_{0.0};  // the loop's last time round (the watchdog's clock)
    std::atomic<int64_t> stalls_total_{0};
    std::atomic<bool> running_{false};
    std::thread thread_;
};

}  // namespace qs

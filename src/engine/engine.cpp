// Engine: creation, submission and abort, the loop and step() (see engine.h); a step's work is in
// engine_step.cpp, engine_sampling.cpp, engine_outputs.cpp and engine_grammar.cpp. Engine thread
// except submit/abort/stats.
#include "engine/engine.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>

#include "core/log.h"
#include "core/timer.h"
#include "engine/image_cache_key.h"
#include "engine/sample_rows.h"
#include "grammar/grammar_compiler.h"

namespace qs {

Result<std::unique_ptr<Engine>> Engine::create(const ModelWeights& weights, Ops& ops, const EngineConfig& config,
                                               std::shared_ptr<const TextDecoder> decoder) {
    return create(weights, std::make_unique<LocalModelRunner>(weights, ops), config, std::move(decoder));
}

namespace {

// --speculative-draft-vocab against the model: the draft's argmax reads lm_head's leading rows.
Status check_draft_vocab(int64_t draft_vocab, const ModelWeights& weights, const ModelRunner& runner) {
    if (draft_vocab == 0) return Status::ok();
    const int64_t V = weights.config.vocab_size;
    if (draft_vocab > V)
        return invalid_argument(fmt::format("speculative_draft_vocab ({}) exceeds the model's vocab_size ({})",
                                            draft_vocab, V));
    if (!leading_rows_supported(weights.lm_head))
        return invalid_argument(fmt::format("speculative_draft_vocab needs a dense or FP8-block lm_head; this "
                                            "checkpoint's is {}",
                                            weight_format_name(weights.lm_head.format)));
    if (runner.num_ranks() > 1)
        return invalid_argument("speculative_draft_vocab is not supported with tensor parallel (each rank holds "
                                "a slice of lm_head's vocabulary)");
    return Status::ok();
}

}  // namespace

Result<std::unique_ptr<Engine>> Engine::create(const ModelWeights& weights, std::unique_ptr<ModelRunner> runner,
                                               const EngineConfig& config, std::shared_ptr<const TextDecoder> decoder) {
    QS_RETURN_IF_ERROR(config.validate());
    if (config.num_speculative_tokens > 0 && !weights.mtp.present)
        return invalid_argument("num_speculative_tokens > 0 needs a checkpoint with an MTP block (mtp.*)");
    QS_RETURN_IF_ERROR(check_draft_vocab(config.speculative_draft_vocab, weights, *runner));
    QS_ASSIGN_OR_RETURN(CapacityPlan plan, plan_capacity(weights.config, config, weights.mtp.present));
    return std::unique_ptr<Engine>(new Engine(weights, std::move(runner), config, plan, std::move(decoder)));
}

Engine::Engine(const ModelWeights& weights, std::unique_ptr<ModelRunner> runner, const EngineConfig& config,
               const CapacityPlan& plan, std::shared_ptr<const TextDecoder> decoder)
    : weights_(weights),
      model_(std::move(runner)),
      config_(config),
      plan_(plan),
      decoder_(std::move(decoder)),
      num_spec_(config.num_speculative_tokens),
      clock_(now_seconds) {
    CacheGeometry geometry = CacheGeometry::for_model(weights.config, plan.num_kv_blocks, config.kv_block_size,
                                                      plan.total_state_slots(), num_spec_ > 0, config.kv_cache_dtype);
    geometry.state_bf16 = config.gdn_state_bf16;
    cache_ = model_->make_cache(geometry);
    cache_mgr_ = std::make_unique<CacheManager>(*cache_, plan_, config_);
    scheduler_ = std::make_unique<Scheduler>(config_, *cache_mgr_);
    mtp_proposed_.assign(size_t(num_spec_), 0);
    mtp_accepted_.assign(size_t(num_spec_), 0);
    // The grammar masks are filled where the sampler's backend can copy them from directly.
    sampling_.bitmask = decltype(sampling_.bitmask)(UploadAllocator<uint32_t>(model_->upload_memory()));
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
    if (request.grammar && request.grammar->vocab_size() != weights_.config.vocab_size)
        return invalid_argument(fmt::format("the grammar was compiled for {} tokens but the model has {}",
                                            request.grammar->vocab_size(), weights_.config.vocab_size));
    if (!request.params.stop.empty() && !decoder_)
        return invalid_argument("stop strings need a tokenizer, and this engine has none");
    // Images: the tower runs here, on the caller's thread, on the backend (Ops::vision_tower; CUDA:
    // its own stream), once per request however the prompt is chunked later; a bad image layout is
    // this request's 400.
    std::shared_ptr<const PromptImages> images;
    std::vector<int32_t> cache_key;
    if (!request.images.empty()) {
        if (!weights_.visual)
            return invalid_argument("image input: this model has no vision tower (no vision_config or no "
                                    "model.visual.* tensors in the checkpoint)");
        if (!model_->supports_mrope())
            return invalid_argument("image input is not supported on this device's backend (its attention has "
                                    "no M-RoPE positions)");
        std::vector<const ImagePatches*> patches;
        for (const auto& p : request.images) patches.push_back(p.get());
        QS_ASSIGN_OR_RETURN(PromptImages prepared,
                            prepare_prompt_images(*weights_.visual, request.prompt_ids, weights_.config.image_token_id,
                                                  patches, model_->vision_ops(), weights_.config.video_token_id));
        images = std::make_shared<const PromptImages>(std::move(prepared));
        cache_key = image_cache_key(request.prompt_ids, weights_.config.image_token_id, request.images,
                                    weights_.config.video_token_id, weights_.visual->config().spatial_merge_size);
    }
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
    inbox_.push_back({Command::kSubmit, std::move(request), std::move(sink), {}, clock_(), std::move(images), std::move(cache_key)});
    inbox_cv_.notify_one();
    return Status::ok();
}

void Engine::abort(const std::string& request_id) {
    std::lock_guard<std::mutex> lock(inbox_mu_);
    if (!live_ids_.count(request_id)) return;
    inbox_.push_back({Command::kAbort, {}, {}, request_id, -1});
    inbox_cv_.notify_one();
}

EngineStats Engine::stats() const {
    std::lock_guard<std::mutex> lock(stats_mu_);
    EngineStats s = stats_;
    s.last_step_age_s = now_seconds() - heartbeat_.load();
    s.stalled = s.last_step_age_s >= config_.engine_stall_timeout_s;
    s.stalls_total = stalls_total_.load();
    return s;
}

bool Engine::healthy() const { return now_seconds() - heartbeat_.load() < config_.engine_stall_timeout_s; }

void Engine::start() {
    if (running_.exchange(true)) return;
    heartbeat_ = now_seconds();
    thread_ = std::thread([this] {
        while (running_.load()) {
            const double now = now_seconds();
            if (now - heartbeat_.load() >= config_.engine_stall_timeout_s) {
                ++stalls_total_;
                log_warn("engine: the loop is moving again after a stall of {:.1f} s", now - heartbeat_.load());
            }
            heartbeat_ = now;
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
    rs->images = std::move(c.images);
    rs->cache_key = std::move(c.cache_key);
    auto seq = std::make_unique<Sequence>();
    seq->id = next_seq_id_++;
    seq->request = rs.get();
    seq->index = 0;
    seq->tokens = rs->request.prompt_ids;
    seq->num_prompt = int64_t(seq->tokens.size());
    seq->sample_key = sampling_key(rs->request.params, 0);
    seq->timing.arrival_s = c.arrival_s;
    if (decoder_) seq->decoder = decoder_->start(rs->request.params.skip_special_tokens);
    seq->stop = std::make_unique<StopChecker>(rs->request.params.stop, rs->request.params.include_stop_str_in_output);
    if (rs->request.grammar) {
        seq->matcher = make_matcher(rs->request);
        seq->grammar_active = rs->request.grammar_after_token < 0;
    }
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

bool Engine::step() {
    const double t0 = now_seconds();
    const double t0_clock = clock_();
    drain_inbox();
    SchedulerOutput sched;
    bool step_has_prompt_rows = false;
    if (!requests_.empty()) sched = scheduler_->schedule();
    const double t1 = now_seconds();
    resolve_drafts();
    if (!sched.scheduled.empty()) {
        const double scheduled_at = clock_();  // vLLM stamps SCHEDULED when the step is scheduled
        for (const ScheduledSeq& ss : sched.scheduled) {
            RequestTiming& t = ss.seq->timing;
            if (t.first_scheduled_s < 0 && ss.num_tokens > 0) t.first_scheduled_s = scheduled_at;
        }
        if (step_hook_) step_hook_(counters_.steps_total);
        int64_t prompt_rows = 0, decode_rows = 0;
        for (const ScheduledSeq& ss : sched.scheduled) {
            // One new token (or a verify span) is decoding; more rows are a prompt being computed.
            const bool decoding = ss.verify || (ss.num_tokens == 1 && ss.seq->num_uncomputed() == 1);
            (decoding ? decode_rows : prompt_rows) += ss.num_tokens;
        }
        run_batch(sched);
        ++counters_.steps_total;
        counters_.prompt_rows_total += prompt_rows;
        counters_.decode_rows_total += decode_rows;
        step_has_prompt_rows = prompt_rows > 0;
    }
    flush_outputs();
    if (!sched.scheduled.empty()) {
        ++profile_.steps;
        profile_.schedule_s += t1 - t0;
        profile_.total_s += now_seconds() - t0;
        const double step_s = clock_() - t0_clock;
        if (step_has_prompt_rows) {
            counters_.step_seconds_prefill += step_s;
            ++counters_.steps_prefill;
        } else {
            counters_.step_seconds_decode += step_s;
            ++counters_.steps_decode;
        }
    }
    publish_stats();
    return !sched.scheduled.empty();
}

}  // namespace qs

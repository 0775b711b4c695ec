// FakeEngine (see fake_engine.h). The loop wakes every step_interval (or at once when work
// arrives), applies aborts and admissions, then advances every running completion by one token.
#include "server/testing/fake_engine.h"

#include <fmt/format.h>

#include <algorithm>

#include "core/timer.h"

namespace qs {

namespace {

int64_t now_ns() {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(
               std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Longest prefix of s that does not end inside a UTF-8 sequence.
size_t utf8_complete_prefix(std::string_view s) {
    size_t n = s.size();
    size_t i = n;
    int back = 0;
    while (i > 0 && back < 4) {
        const unsigned char c = static_cast<unsigned char>(s[i - 1]);
        if ((c & 0xC0) != 0x80) {  // lead byte or ASCII
            const size_t need = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 1;
            return (n - (i - 1)) >= need ? n : i - 1;
        }
        --i;
        ++back;
    }
    return n;
}

}  // namespace

FakeEngine::FakeEngine(FakeEngineOptions options)
    : opts_(std::move(options)), start_time_(std::chrono::steady_clock::now()) {
    QS_CHECK(opts_.token_bytes && opts_.encode);
    last_step_ns_ = now_ns();
    loop_alive_ = true;
    thread_ = std::thread([this] { loop(); });
}

FakeEngine::~FakeEngine() {
    {
        std::lock_guard<std::mutex> lock(inbox_mu_);
        stop_ = true;
    }
    inbox_cv_.notify_all();
    thread_.join();
}

Status FakeEngine::submit(GenerationRequest request, OutputSink sink) {
    QS_RETURN_IF_ERROR(request.params.validate());
    if (request.prompt_ids.empty()) return invalid_argument("prompt must not be empty");
    if (opts_.vocab_size > 0)
        for (const TokenBias& b : request.params.logit_bias)
            if (b.token >= opts_.vocab_size)
                return invalid_argument(fmt::format("logit_bias token {} is outside the vocabulary (vocab_size {})",
                                                    b.token, opts_.vocab_size));
    const int64_t prompt_len = int64_t(request.prompt_ids.size());
    if (prompt_len + request.params.max_tokens > opts_.max_model_len)
        return invalid_argument(fmt::format("prompt ({} tokens) plus max_tokens ({}) exceeds max_model_len ({})",
                                            prompt_len, request.params.max_tokens, opts_.max_model_len));
    if (num_queued_.load() >= opts_.max_waiting)
        return Status(ErrorKind::kResourceExhausted,
                      fmt::format("waiting queue is full ({} requests); retry later", opts_.max_waiting));
    {
        std::lock_guard<std::mutex> lock(ids_mu_);
        if (!live_ids_.emplace(request.id, 0).second)
            return invalid_argument(fmt::format("duplicate request id '{}'", request.id));
    }
    ++num_live_;
    ++num_queued_;
    {
        std::lock_guard<std::mutex> lock(inbox_mu_);
        inbox_submits_.emplace_back(std::move(request), std::move(sink));
    }
    inbox_cv_.notify_one();
    return Status::ok();
}

void FakeEngine::abort(const std::string& request_id) {
    {
        std::lock_guard<std::mutex> lock(inbox_mu_);
        inbox_aborts_.push_back(request_id);
    }
    inbox_cv_.notify_one();
}

EngineStats FakeEngine::stats() const {
    EngineStats s;
    s.num_running = num_running_.load();
    s.num_waiting = num_queued_.load();
    s.num_prompt_tokens_total = prompt_tokens_total_.load();
    s.num_completion_tokens_total = completion_tokens_total_.load();
    s.kv_usage = double(num_pages_used_.load()) / double(opts_.num_pages);
    s.state_slot_usage = double(s.num_running) / double(opts_.max_running);
    s.kv_pages_in_use = num_pages_used_.load();
    s.state_slots_in_use = s.num_running;
    s.steps_total = steps_total_.load();
    s.last_step_age_s = double(now_ns() - last_step_ns_.load()) * 1e-9;
    s.stalled = s.last_step_age_s >= opts_.health_stall_s;
    s.stalls_total = stalls_total_.load();
    return s;
}

bool FakeEngine::healthy() const {
    const double since_start =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start_time_).count();
    if (since_start < opts_.load_s) return false;
    return loop_alive_.load() && double(now_ns() - last_step_ns_.load()) * 1e-9 < opts_.health_stall_s;
}

void FakeEngine::loop() {
    auto next = std::chrono::steady_clock::now();
    while (true) {
        {
            std::unique_lock<std::mutex> lock(inbox_mu_);
            const bool busy = !running_.empty() || !waiting_.empty();
            // Idle: sleep until work arrives (waking now and then to show liveness).
            const auto idle_wake = std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                std::chrono::duration<double>(std::min(0.1, opts_.health_stall_s / 4)));
            auto deadline = busy ? next : std::chrono::steady_clock::now() + idle_wake;
            inbox_cv_.wait_until(lock, deadline, [&] {
                return stop_ || (!busy && (!inbox_submits_.empty() || !inbox_aborts_.empty()));
            });
            if (stop_) break;
        }
        if (wedged_) {
            std::this_thread::sleep_for(std::chrono::milliseconds(5));
            continue;
        }
        next = std::chrono::steady_clock::now() + opts_.step_interval;
        if (double(now_ns() - last_step_ns_.load()) * 1e-9 >= opts_.health_stall_s) ++stalls_total_;
        step();
        ++steps_total_;
        last_step_ns_ = now_ns();
    }
    // Shutdown: everything left ends as aborted.
    {
        std::lock_guard<std::mutex> lock(inbox_mu_);
        for (auto& [req, sink] : inbox_submits_) {
            Live live{std::move(req), std::move(sink), {}, 0, now_seconds()};
            start_request(live);
            waiting_.push_back(std::move(live));
        }
        inbox_submits_.clear();
    }
    for (auto& l : running_) finish_all(l, FinishReason::kAbort);
    for (auto& l : waiting_) finish_all(l, FinishReason::kAbort);
    running_.clear();
    waiting_.clear();
    num_live_ = 0;
    num_pages_used_ = 0;
    loop_alive_ = false;
}

void FakeEngine::start_request(Live& live) {
    const auto& ids = live.request.prompt_ids;
    std::string prompt;
    for (int32_t id : ids) prompt += opts_.token_bytes(id);
    std::string reply = "This is a fake reply.";
    bool repeat = prompt.find("[[repeat]]") != std::string::npos;
    bool fail = prompt.find("[[fail]]") != std::string::npos;
    if (size_t p = prompt.rfind("[[reply:"); p != std::string::npos) {
        size_t end = prompt.find("]]", p + 8);
        reply = prompt.substr(p + 8, end == std::string::npos ? std::string::npos : end - p - 8);
    }
    if (prompt.find("[[echo_params]]") != std::string::npos) {
        const SamplingParams& sp = live.request.params;
        reply = "logit_bias=";
        for (size_t i = 0; i < sp.logit_bias.size(); ++i)
            reply += fmt::format("{}{}:{}", i ? "," : "", sp.logit_bias[i].token, sp.logit_bias[i].bias);
        reply += fmt::format(" min_tokens={}", sp.min_tokens);
    }
    if (prompt.find("[[echo_request]]") != std::string::npos) {
        reply = fmt::format("priority={} prompt_ids=", live.request.priority);
        for (size_t i = 0; i < ids.size(); ++i) reply += fmt::format("{}{}", i ? "," : "", ids[i]);
    }
    live.completions.resize(size_t(live.request.params.n));
    for (size_t i = 0; i < live.completions.size(); ++i) {
        Completion& c = live.completions[i];
        std::string text = reply;
        for (size_t q; (q = text.find("{i}")) != std::string::npos;) text.replace(q, 3, std::to_string(i));
        c.reply = opts_.encode(text);
        c.repeat = repeat;
        c.fail = fail;
    }
}

void FakeEngine::step() {
    std::deque<std::pair<GenerationRequest, OutputSink>> submits;
    std::vector<std::string> aborts;
    {
        std::lock_guard<std::mutex> lock(inbox_mu_);
        submits.swap(inbox_submits_);
        aborts.swap(inbox_aborts_);
    }
    const double now = now_seconds();
    for (auto& [req, sink] : submits) {
        Live live{std::move(req), std::move(sink), {}, 0, now};
        start_request(live);
        waiting_.push_back(std::move(live));
    }
    for (const auto& id : aborts) {
        auto drop = [&](Live& l) {
            if (l.request.id != id) return false;
            finish_all(l, FinishReason::kAbort);
            ++num_aborted_;
            return true;
        };
        running_.erase(std::remove_if(running_.begin(), running_.end(), drop), running_.end());
        waiting_.erase(std::remove_if(waiting_.begin(), waiting_.end(), drop), waiting_.end());
    }
    while (!waiting_.empty() && int64_t(running_.size()) < opts_.max_running) {
        running_.push_back(std::move(waiting_.front()));
        waiting_.pop_front();
        running_.back().first_scheduled_s = now;
        prompt_tokens_total_ += int64_t(running_.back().request.prompt_ids.size());
    }
    int64_t pages = 0;
    const double emit_at = now_seconds();
    for (auto& live : running_) {
        int64_t total_tokens = int64_t(live.request.prompt_ids.size());
        for (int32_t i = 0; i < int32_t(live.completions.size()); ++i) {
            if (!live.completions[size_t(i)].finished) deliver(live, advance(live, i, emit_at));
            total_tokens += live.completions[size_t(i)].num_tokens;
        }
        live.pages = (total_tokens + opts_.page_tokens - 1) / opts_.page_tokens;
        pages += live.pages;
    }
    auto done = [](const Live& l) {
        return std::all_of(l.completions.begin(), l.completions.end(), [](const Completion& c) { return c.finished; });
    };
    for (auto& l : running_)
        if (done(l)) {
            pages -= l.pages;
            std::lock_guard<std::mutex> lock(ids_mu_);
            live_ids_.erase(l.request.id);
        }
    const int64_t before = int64_t(running_.size());
    running_.erase(std::remove_if(running_.begin(), running_.end(), done), running_.end());
    num_live_ -= before - int64_t(running_.size());
    num_running_ = int64_t(running_.size());
    num_queued_ = int64_t(waiting_.size()) + [&] {
        std::lock_guard<std::mutex> lock(inbox_mu_);
        return int64_t(inbox_submits_.size());
    }();
    num_pages_used_ = pages;
}

RequestOutput FakeEngine::advance(Live& live, int32_t index, double now) {
    Completion& c = live.completions[size_t(index)];
    const SamplingParams& p = live.request.params;
    RequestOutput out;
    out.request_id = live.request.id;
    out.index = index;
    out.num_prompt_tokens = int64_t(live.request.prompt_ids.size());
    if (c.fail && c.num_tokens >= 2) {
        c.finished = true;
        out.finish_reason = FinishReason::kError;
        out.error = "scripted engine failure";
        out.num_completion_tokens = c.num_tokens;
        return out;
    }
    int32_t id;
    if (c.repeat) {
        static constexpr std::string_view kPattern = "ab ";
        id = int32_t(kPattern[size_t(c.num_tokens) % kPattern.size()]);
    } else if (c.pos < c.reply.size()) {
        id = c.reply[c.pos];
    } else {
        id = opts_.eos_ids.empty() ? 0 : opts_.eos_ids[0];
    }
    auto is_eos = [&](int32_t t) {
        return !p.ignore_eos && std::find(opts_.eos_ids.begin(), opts_.eos_ids.end(), t) != opts_.eos_ids.end();
    };
    auto is_stop_id = [&](int32_t t) {
        return std::find(p.stop_token_ids.begin(), p.stop_token_ids.end(), t) != p.stop_token_ids.end();
    };
    // min_tokens: EOS and stop_token_ids are banned until then; the script waits with '.'.
    if ((is_eos(id) || is_stop_id(id)) && c.num_tokens < p.min_tokens) {
        id = int32_t('.');
    } else if (!c.repeat && c.pos < c.reply.size()) {
        ++c.pos;
    }
    ++c.num_tokens;
    ++completion_tokens_total_;
    if (c.first_token_s < 0) c.first_token_s = now;
    c.last_token_s = now;
    out.token_ids.push_back(id);
    out.num_completion_tokens = c.num_tokens;
    if (p.logprobs >= 0) {
        const float lp = -0.125f * float(1 + c.num_tokens % 4);
        out.logprobs.push_back({id, lp});
        std::vector<TokenLogprob> top;
        for (int64_t k = 0; k < p.logprobs; ++k) top.push_back({k == 0 ? id : int32_t(32 + k), k == 0 ? lp : lp - float(k)});
        out.top_logprobs.push_back(std::move(top));
    }
    if (is_eos(id) || is_stop_id(id)) {
        out.finish_reason = FinishReason::kStop;
        out.stop_reason = std::to_string(id);
    } else {
        c.text += opts_.token_bytes(id);
    }
    // Stop strings: search the new region; hold back a tail that may begin one.
    for (const auto& s : p.stop) {
        const size_t from = c.sent >= s.size() ? c.sent - s.size() + 1 : 0;
        if (size_t q = c.text.find(s, from); q != std::string::npos) {
            const size_t end = p.include_stop_str_in_output ? q + s.size() : q;
            c.text.resize(std::max(end, c.sent));
            out.finish_reason = FinishReason::kStop;
            out.stop_reason = s;
            break;
        }
    }
    if (out.finish_reason == FinishReason::kNone && c.num_tokens >= p.max_tokens) out.finish_reason = FinishReason::kLength;
    size_t emit_to = c.text.size();
    if (out.finish_reason == FinishReason::kNone) {
        for (const auto& s : p.stop)
            for (size_t n = std::min(s.size() - 1, c.text.size() - c.sent); n > 0; --n)
                if (c.text.compare(c.text.size() - n, n, s, 0, n) == 0) {
                    emit_to = std::min(emit_to, c.text.size() - n);
                    break;
                }
        emit_to = c.sent + utf8_complete_prefix(std::string_view(c.text).substr(c.sent, emit_to - c.sent));
    }
    out.text = c.text.substr(c.sent, emit_to - c.sent);
    c.sent = emit_to;
    if (out.finish_reason != FinishReason::kNone) c.finished = true;
    return out;
}

void FakeEngine::finish_all(Live& live, FinishReason reason) {
    for (int32_t i = 0; i < int32_t(live.completions.size()); ++i) {
        Completion& c = live.completions[size_t(i)];
        if (c.finished) continue;
        c.finished = true;
        RequestOutput out;
        out.request_id = live.request.id;
        out.index = i;
        out.finish_reason = reason;
        out.num_prompt_tokens = int64_t(live.request.prompt_ids.size());
        out.num_completion_tokens = c.num_tokens;
        deliver(live, std::move(out));
    }
    {
        std::lock_guard<std::mutex> lock(ids_mu_);
        live_ids_.erase(live.request.id);
    }
    --num_live_;
}

void FakeEngine::deliver(Live& live, RequestOutput&& out) {
    if (out.finish_reason != FinishReason::kNone) {
        const Completion& c = live.completions[size_t(out.index)];
        out.timing = {live.arrival_s, live.first_scheduled_s, c.first_token_s, c.last_token_s};
    }
    if (opts_.on_emit) opts_.on_emit(out);
    live.sink(std::move(out));
}

}  // namespace qs

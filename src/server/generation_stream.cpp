// GenerationStream (see generation_stream.h).
#include "server/generation_stream.h"

#include <fmt/format.h>

#include <algorithm>

#include "server/request_log.h"

namespace qs {

using J = nlohmann::json;

GenerationStream::GenerationStream(ServerState& state, std::shared_ptr<Exchange> exchange, GenerationSpec spec,
                                   ResponseHeader header, std::vector<StreamPrompt> prompts,
                                   std::vector<std::string> engine_ids, bool starts_in_reasoning,
                                   std::chrono::steady_clock::time_point arrival)
    : state_(state), exchange_(std::move(exchange)), spec_(std::move(spec)), header_(std::move(header)),
      prompts_(std::move(prompts)), engine_ids_(std::move(engine_ids)), arrival_(arrival) {
    QS_CHECK(!prompts_.empty() && prompts_.size() == engine_ids_.size());
    cached_prompt_tokens_.assign(prompts_.size(), 0);
    submitted_prompts_ = prompts_.size();
    choices_.resize(prompts_.size() * size_t(spec_.params.n));
    for (size_t i = 0; i < choices_.size(); ++i) {
        Choice& c = choices_[i];
        c.prompt = i / size_t(spec_.params.n);
        if (spec_.kind == ApiKind::kChat) {
            OutputParserOptions o;
            o.starts_in_reasoning = starts_in_reasoning;
            o.parse_tool_calls = !spec_.tools.is_null() && !spec_.tool_choice_none;
            o.tools = spec_.tools;
            c.parser = state_.text().make_output_parser(o);
            c.logprobs = J::array();
        } else {
            c.logprobs = empty_completion_logprobs();
            if (!spec_.stream) c.content = prompts_[c.prompt].echo_text;
        }
    }
}

void GenerationStream::on_output(RequestOutput&& out) {
    bool post = false;
    {
        std::lock_guard<std::mutex> lock(outbox_mu_);
        outbox_.push_back(std::move(out));
        post = !drain_posted_;
        drain_posted_ = true;
    }
    if (post) exchange_->post([self = shared_from_this()] { self->drain(); });
}

void GenerationStream::abort_in_engine() const {
    if (EngineApi* e = state_.engine())
        for (const auto& id : engine_ids_) e->abort(id);
}

void GenerationStream::on_client_closed() {
    if (done_) return;
    client_closed_ = true;
    state_.metrics().client_disconnects.fetch_add(1, std::memory_order_relaxed);
    if (submitted_.load()) abort_in_engine();
}

void GenerationStream::mark_submitted() {
    submitted_ = true;
    if (client_closed_.load()) abort_in_engine();
    // Streams get their 200 and headers as soon as the engine has the request, so a client
    // whose request waits in the queue knows it was accepted.
    if (spec_.stream) exchange_->post([self = shared_from_this()] { self->start_stream_once(); });
    if (state_.options().request_timeout_s > 0) exchange_->post([self = shared_from_this()] { self->arm_timeout(); });
}

void GenerationStream::arm_timeout() {
    if (done_) return;
    const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - arrival_).count();
    const double left = std::max(0.0, state_.options().request_timeout_s - elapsed);
    cancel_timeout_ = exchange_->post_after(left, [weak = std::weak_ptr<GenerationStream>(shared_from_this())] {
        if (auto self = weak.lock()) self->on_timeout();
    });
}

void GenerationStream::on_timeout() {
    if (done_ || timed_out_) return;
    timed_out_ = true;
    state_.metrics().request_timeouts.fetch_add(1, std::memory_order_relaxed);
    abort_in_engine();
    ApiError e;
    e.http_status = 504;
    e.type = "timeout_error";
    e.code = "request_timeout";
    e.message = fmt::format("the request did not finish within {} s (the server's --request-timeout-s); it was "
                            "aborted",
                            state_.options().request_timeout_s);
    if (exchange_->closed()) return;
    if (!spec_.stream) return exchange_->respond(api_error_response(e));
    start_stream_once();
    exchange_->write_stream("data: " + api_error_body(e) + "\n\n");
    exchange_->write_stream(kSseDone);
    exchange_->end_stream();
}

void GenerationStream::start_stream_once() {
    if (stream_started_ || done_ || exchange_->closed()) return;
    exchange_->start_stream("text/event-stream");
    stream_started_ = true;
}

void GenerationStream::drain() {
    std::vector<RequestOutput> batch;
    {
        std::lock_guard<std::mutex> lock(outbox_mu_);
        batch.swap(outbox_);
        drain_posted_ = false;
    }
    for (auto& out : batch) {
        if (done_) break;
        handle(out);
    }
}

std::string GenerationStream::finish_reason_for(const Choice& c, FinishReason r) const {
    switch (r) {
        case FinishReason::kStop:
            if (!c.tool_calls.empty()) return "tool_calls";
            break;
        case FinishReason::kLength: return "length";
        case FinishReason::kAbort: return "abort";
        case FinishReason::kError: return "error";
        case FinishReason::kNone: return "";
    }
    if (spec_.json_object) {
        // A non-streamed completion's text starts with the echoed prompt.
        const size_t echoed = spec_.kind == ApiKind::kCompletion && !spec_.stream ? prompts_[c.prompt].echo_text.size() : 0;
        const auto j = J::parse(c.content.substr(echoed), nullptr, false);
        if (j.is_discarded() || !j.is_object()) return "invalid_json";
    }
    return "stop";
}

void GenerationStream::stream_chat(Choice& c, int32_t index, const ParsedDelta& d, J logprobs, const char* finish) {
    J delta = J::object();
    if (!c.role_sent) {
        delta["role"] = "assistant";
        delta["content"] = "";
        c.role_sent = true;
    }
    if (!d.reasoning.empty()) delta["reasoning_content"] = d.reasoning;
    if (!d.content.empty()) delta["content"] = d.content;
    if (!d.tool_calls.empty()) delta["tool_calls"] = tool_calls_json(d.tool_calls, c.tool_calls.size() - d.tool_calls.size(), true);
    const bool has_logprobs = logprobs.is_array() && !logprobs.empty();
    if (delta.empty() && !has_logprobs && !finish) return;
    J choice = {{"index", index}, {"delta", std::move(delta)},
                {"logprobs", has_logprobs ? J{{"content", std::move(logprobs)}} : J(nullptr)},
                {"finish_reason", finish ? J(finish) : J(nullptr)}};
    write_chunk(chat_chunk(header_, J::array({std::move(choice)}), spec_.include_usage), c);
}

void GenerationStream::write_chunk(J chunk, const Choice& c) {
    if (spec_.continuous_usage)
        chunk["usage"] = usage_json(prompts_[c.prompt].num_tokens, c.num_tokens, cached_prompt_tokens_[c.prompt]);
    exchange_->write_stream(sse_event(chunk));
}

void GenerationStream::handle(RequestOutput& out) {
    QS_CHECK(out.index >= 0 && size_t(out.index) < choices_.size());
    Choice& c = choices_[size_t(out.index)];
    if (c.finished) return;
    if (!out.token_ids.empty()) {
        const auto now = std::chrono::steady_clock::now();
        ServerMetrics& m = state_.metrics();
        if (first_token_time_ == std::chrono::steady_clock::time_point{}) {
            first_token_time_ = now;
            const double ttft = std::chrono::duration<double>(first_token_time_ - arrival_).count();
            m.ttft_s.observe(ttft);
            m.vllm.ttft_s.observe(ttft);
        }
        // vLLM's inter-token latency: one observation per output step of a completion (an MTP
        // step that emits several tokens is one gap).
        if (c.last_token_time != std::chrono::steady_clock::time_point{})
            m.vllm.itl_s.observe(std::chrono::duration<double>(now - c.last_token_time).count());
        c.last_token_time = now;
    }
    c.num_tokens += int64_t(out.token_ids.size());
    for (const auto& lp : out.logprobs) c.cum_logprob += lp.logprob;
    cached_prompt_tokens_[c.prompt] = std::max(cached_prompt_tokens_[c.prompt], out.num_cached_prompt_tokens);
    if (spec_.stream) start_stream_once();
    const bool finishing = out.finish_reason != FinishReason::kNone;
    if (finishing) c.timing = out.timing;
    if (spec_.kind == ApiKind::kChat) {
        ParsedDelta d = c.parser->feed(out.text);
        if (finishing) {
            ParsedDelta rest = c.parser->finish();
            d.reasoning += rest.reasoning;
            d.content += rest.content;
            for (auto& t : rest.tool_calls) d.tool_calls.push_back(std::move(t));
        }
        // parallel_tool_calls false: the first call only (vLLM keeps the first too).
        if (!spec_.parallel_tool_calls && !d.tool_calls.empty())
            d.tool_calls.resize(c.tool_calls.empty() ? 1 : 0);
        c.reasoning += d.reasoning;
        c.content += d.content;
        for (const auto& t : d.tool_calls) c.tool_calls.push_back(t);
        J lp = J::array();
        if (spec_.logprobs) append_chat_logprobs(out, state_.text(), spec_.stream ? lp : c.logprobs);
        if (finishing) {
            c.finish_reason = finish_reason_for(c, out.finish_reason);
            c.error = out.error;
        }
        if (spec_.stream) {
            stream_chat(c, out.index, d, std::move(lp), nullptr);
            if (finishing && out.finish_reason != FinishReason::kError)
                stream_chat(c, out.index, ParsedDelta{}, J::array(), c.finish_reason.c_str());
        }
    } else {
        c.content += out.text;
        J lp = empty_completion_logprobs();
        if (spec_.logprobs) append_completion_logprobs(out, state_.text(), c.text_offset, spec_.stream ? lp : c.logprobs);
        if (finishing) {
            c.finish_reason = finish_reason_for(c, out.finish_reason);
            c.error = out.error;
        }
        std::string text = out.text;
        if (spec_.stream && !c.echo_sent) {
            text = prompts_[c.prompt].echo_text + text;
            c.echo_sent = true;
        }
        if (spec_.stream && (!text.empty() || finishing || !lp["tokens"].empty()) &&
            !(finishing && out.finish_reason == FinishReason::kError && text.empty())) {
            J choice = {{"index", out.index}, {"text", std::move(text)},
                        {"logprobs", spec_.logprobs ? lp : J(nullptr)},
                        {"finish_reason", finishing && out.finish_reason != FinishReason::kError ? J(c.finish_reason) : J(nullptr)}};
            write_chunk(completion_chunk(header_, J::array({std::move(choice)}), spec_.include_usage), c);
        }
    }
    if (finishing) {
        c.finished = true;
        if (++num_finished_ == int64_t(choices_.size())) finish_request();
    }
}

void GenerationStream::record_metrics_at_finish() {
    ServerMetrics& m = state_.metrics();
    int64_t completion = 0;
    for (const auto& c : choices_) {
        if (c.prompt >= submitted_prompts_) continue;  // a refused batch's rest: no request to count
        completion += c.num_tokens;
        const std::string& r = c.finish_reason;
        auto& counter = r == "length" ? m.finished_length : r == "tool_calls" ? m.finished_tool_calls
                      : r == "abort" ? m.finished_abort : r == "error" ? m.finished_error : m.finished_stop;
        counter.fetch_add(1, std::memory_order_relaxed);
    }
    m.prompt_tokens.fetch_add(uint64_t(prompt_tokens()), std::memory_order_relaxed);
    m.completion_tokens.fetch_add(uint64_t(completion), std::memory_order_relaxed);
    const auto now = std::chrono::steady_clock::now();
    const double e2e = std::chrono::duration<double>(now - arrival_).count();
    m.e2e_s.observe(e2e);
    const bool has_first = first_token_time_ != std::chrono::steady_clock::time_point{};
    const double decode_s = has_first ? std::chrono::duration<double>(now - first_token_time_).count() : 0.0;
    if (has_first && completion > int64_t(choices_.size()))
        m.tpot_s.observe(decode_s / double(completion / int64_t(choices_.size()) - 1));
    const RequestTiming t = request_timing();
    if (t.scheduled()) m.queue_s.observe(t.queue_s());
    if (t.has_tokens()) {
        m.prefill_s.observe(t.prefill_s());
        m.decode_s.observe(t.decode_s());
        m.inference_s.observe(t.inference_s());
    }
    // vLLM counts each of the n completions as a request; its phase times are the engine's.
    for (const auto& c : choices_) {
        if (c.prompt >= submitted_prompts_) continue;
        m.vllm.e2e_s.observe(e2e);
        m.vllm.request_prompt_tokens.observe(double(prompts_[c.prompt].num_tokens));
        m.vllm.request_generation_tokens.observe(double(c.num_tokens));
        if (spec_.max_tokens_given) m.vllm.request_max_tokens.observe(double(spec_.params.max_tokens));
        if (c.timing.scheduled()) m.vllm.queue_s.observe(c.timing.queue_s());
        if (!c.timing.has_tokens()) continue;
        m.vllm.prefill_s.observe(c.timing.prefill_s());
        m.vllm.decode_s.observe(c.timing.decode_s());
        m.vllm.inference_s.observe(c.timing.inference_s());
        if (c.num_tokens > 1) m.vllm.request_tpot_s.observe(c.timing.decode_s() / double(c.num_tokens - 1));
    }
}

RequestTiming GenerationStream::request_timing() const {
    RequestTiming t;
    for (const auto& c : choices_) {
        const RequestTiming& ct = c.timing;
        if (t.arrival_s < 0) t.arrival_s = ct.arrival_s;
        if (t.first_scheduled_s < 0) t.first_scheduled_s = ct.first_scheduled_s;
        if (ct.first_token_s >= 0 && (t.first_token_s < 0 || ct.first_token_s < t.first_token_s))
            t.first_token_s = ct.first_token_s;
        t.last_token_s = std::max(t.last_token_s, ct.last_token_s);
    }
    return t;
}

void GenerationStream::log_at_finish() const {
    const ServerOptions& o = state_.options();
    if (!o.log_requests) return;
    RequestLogRecord r;
    r.id = header_.id;
    r.api = spec_.kind == ApiKind::kChat ? "chat" : "completions";
    r.stream = spec_.stream;
    r.prompt_tokens = prompt_tokens();
    r.cached_prompt_tokens = cached_prompt_tokens();
    for (const auto& c : choices_) {
        r.completion_tokens += c.num_tokens;
        r.finish_reasons.push_back(c.finish_reason);
    }
    const auto now = std::chrono::steady_clock::now();
    r.e2e_s = std::chrono::duration<double>(now - arrival_).count();
    if (first_token_time_ != std::chrono::steady_clock::time_point{})
        r.ttft_s = std::chrono::duration<double>(first_token_time_ - arrival_).count();
    const RequestTiming t = request_timing();
    if (t.scheduled()) r.queue_s = t.queue_s();
    if (t.has_tokens()) {
        r.prefill_s = t.prefill_s();
        r.decode_s = t.decode_s();
    }
    if (o.log_prompts) {
        if (spec_.kind == ApiKind::kChat) r.prompt = spec_.messages.dump(-1, ' ', false, J::error_handler_t::replace);
        else {
            // One prompt as sent (text, or its ids as JSON); a batch as a JSON array of them.
            J batch = J::array();
            for (const auto& p : spec_.prompts) batch.push_back(p.text ? J(*p.text) : J(p.ids));
            r.prompt = spec_.prompts.size() == 1 && spec_.prompts[0].text
                           ? *spec_.prompts[0].text
                           : (spec_.prompts.size() == 1 ? batch[0] : batch).dump(-1, ' ', false, J::error_handler_t::replace);
        }
    }
    log_request(r);
}

int64_t GenerationStream::prompt_tokens() const {
    int64_t n = 0;
    for (size_t p = 0; p < submitted_prompts_; ++p) n += prompts_[p].num_tokens;
    return n;
}

int64_t GenerationStream::cached_prompt_tokens() const {
    int64_t n = 0;
    for (size_t p = 0; p < submitted_prompts_; ++p) n += cached_prompt_tokens_[p];
    return n;
}

void GenerationStream::fail_unsubmitted(size_t first, ApiError error) {
    exchange_->post([self = shared_from_this(), first, error = std::move(error)] { self->on_fail_unsubmitted(first, error); });
}

void GenerationStream::on_fail_unsubmitted(size_t first, const ApiError& error) {
    failed_ = error;
    submitted_prompts_ = first;
    // The unsubmitted prompts' choices will never hear from the engine: count them finished now.
    for (auto& c : choices_)
        if (c.prompt >= first && !c.finished) {
            c.finished = true;
            c.finish_reason = "abort";
            ++num_finished_;
        }
    abort_in_engine();
    if (num_finished_ == int64_t(choices_.size()) && !done_) finish_request();
}

void GenerationStream::finish_request() {
    done_ = true;
    if (cancel_timeout_) cancel_timeout_();
    record_metrics_at_finish();
    log_at_finish();
    for (const auto& id : engine_ids_) state_.remove_live(id);
    state_.metrics().in_flight.fetch_sub(1, std::memory_order_relaxed);
    int64_t completion = 0;
    for (const auto& c : choices_) completion += c.num_tokens;
    const J usage = usage_json(prompt_tokens(), completion, cached_prompt_tokens());
    std::optional<ApiError> error = failed_;
    if (!error)
        for (const auto& c : choices_)
            if (c.finish_reason == "error") {
                ApiError e;
                e.http_status = 500;
                e.type = "internal_error";
                e.message = c.error.empty() ? "engine error" : c.error;
                error = e;
            }
    if (exchange_->closed()) return;
    if (spec_.stream && (stream_started_ || !failed_)) {
        start_stream_once();
        if (error) exchange_->write_stream("data: " + api_error_body(*error) + "\n\n");
        if (spec_.include_usage && !failed_) {
            J chunk = spec_.kind == ApiKind::kChat ? chat_chunk(header_, J::array(), false)
                                                   : completion_chunk(header_, J::array(), false);
            chunk["usage"] = usage;
            exchange_->write_stream(sse_event(chunk));
        }
        exchange_->write_stream(kSseDone);
        exchange_->end_stream();
        return;
    }
    if (error) {
        exchange_->respond(api_error_response(*error));
        return;
    }
    bool aborted = false;
    for (const auto& c : choices_) aborted |= c.finish_reason == "abort";
    if (aborted) {
        ApiError e;
        e.http_status = 503;
        e.type = "server_error";
        e.code = "request_aborted";
        e.message = "the request was aborted (server shutting down)";
        exchange_->respond(api_error_response(e));
        return;
    }
    J body = {{"id", header_.id},
              {"object", spec_.kind == ApiKind::kChat ? "chat.completion" : "text_completion"},
              {"created", header_.created}, {"model", header_.model}, {"choices", choices_json()},
              {"usage", usage}};
    HttpResponse r;
    r.body = dump(body);
    exchange_->respond(std::move(r));
}

J GenerationStream::choices_json() const {
    // best_of: per prompt, the n completions with the highest cumulative logprob, in that order
    // (vLLM's); the returned choices are numbered prompt by prompt.
    const size_t per_prompt = size_t(spec_.params.n);
    const size_t returned = spec_.n_returned > 0 ? size_t(spec_.n_returned) : per_prompt;
    J choices = J::array();
    for (size_t p = 0; p < prompts_.size(); ++p) {
        std::vector<size_t> order(per_prompt);
        for (size_t j = 0; j < per_prompt; ++j) order[j] = p * per_prompt + j;
        if (spec_.n_returned > 0) {
            std::stable_sort(order.begin(), order.end(),
                             [&](size_t a, size_t b) { return choices_[a].cum_logprob > choices_[b].cum_logprob; });
            order.resize(returned);
        }
        for (size_t j = 0; j < order.size(); ++j) {
            const Choice& c = choices_[order[j]];
            const size_t index = p * returned + j;
            if (spec_.kind == ApiKind::kChat) {
                J msg = {{"role", "assistant"}};
                msg["content"] = c.content.empty() && !c.tool_calls.empty() ? J(nullptr) : J(c.content);
                msg["reasoning_content"] = c.reasoning.empty() ? J(nullptr) : J(c.reasoning);
                if (!c.tool_calls.empty()) msg["tool_calls"] = tool_calls_json(c.tool_calls, 0, false);
                choices.push_back({{"index", index}, {"message", std::move(msg)},
                                   {"logprobs", spec_.logprobs ? J{{"content", c.logprobs}} : J(nullptr)},
                                   {"finish_reason", c.finish_reason}});
            } else {
                choices.push_back({{"index", index}, {"text", c.content},
                                   {"logprobs", spec_.logprobs ? c.logprobs : J(nullptr)},
                                   {"finish_reason", c.finish_reason}});
            }
        }
    }
    return choices;
}

}  // namespace qs

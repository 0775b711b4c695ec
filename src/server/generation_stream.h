// GenerationStream: one accepted generation request from engine submit to the last byte. The
// engine's sink (engine thread) only appends outputs to an outbox and posts a drain to the
// connection strand; the drain (strand) parses reasoning/tool calls, builds SSE chunks or the
// final JSON body, counts usage and records metrics. If the client goes away the request is
// aborted in the engine; the stream still runs until the engine's final output so that the
// accounting (in-flight count, live ids) is exact. With --request-timeout-s a deadline counted
// from arrival answers the client at once (504 request_timeout, or an error event ending the
// stream) and aborts the request in the engine, which frees its slot and pages when it takes the
// abort; the accounting again waits for the engine's final output.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "server/http_types.h"
#include "server/openai_parse.h"
#include "server/openai_write.h"
#include "server/server_state.h"

namespace qs {

// One prompt of the request as the stream reports it (a completions request may batch several:
// prompt i's completions are choices i·n .. i·n + n − 1, engine request engine_ids[i]).
struct StreamPrompt {
    int64_t num_tokens = 0;  // usage's prompt_tokens
    std::string echo_text;   // completions with echo: the text that starts each of its choices
};

class GenerationStream : public std::enable_shared_from_this<GenerationStream> {
public:
    GenerationStream(ServerState& state, std::shared_ptr<Exchange> exchange, GenerationSpec spec,
                     ResponseHeader header, std::vector<StreamPrompt> prompts, std::vector<std::string> engine_ids,
                     bool starts_in_reasoning, std::chrono::steady_clock::time_point arrival);

    // Engine thread: queue and schedule a drain. Never blocks on the connection.
    void on_output(RequestOutput&& out);
    // Strand: the client went away (or overflowed its buffer).
    void on_client_closed();
    // Worker thread, after a successful submit: aborts at once if the client already left; arms
    // the request's deadline.
    void mark_submitted();
    // Worker thread: prompts first.. of a batch could not be submitted (error says why). The
    // submitted ones are aborted, and the request is answered with the error once they have ended.
    void fail_unsubmitted(size_t first, ApiError error);

    const std::string& id() const { return header_.id; }

private:
    struct Choice {
        size_t prompt = 0;  // its prompt in prompts_
        std::unique_ptr<OutputParser> parser;  // chat only
        bool role_sent = false;
        bool finished = false;
        std::string content, reasoning;
        std::vector<ToolCall> tool_calls;
        nlohmann::json logprobs;  // accumulated (non-streaming)
        size_t text_offset = 0;
        bool echo_sent = false;  // completions with echo: the prompt went out (stream)
        int64_t num_tokens = 0;
        std::chrono::steady_clock::time_point last_token_time{};  // inter-token latency
        double cum_logprob = 0;  // best_of: the sum of the sampled tokens' logprobs
        std::string finish_reason;
        std::string error;
        RequestTiming timing;  // from the engine's final output
    };

    void drain();
    void start_stream_once();
    void handle(RequestOutput& out);
    void stream_chat(Choice& c, int32_t index, const ParsedDelta& d, nlohmann::json logprobs, const char* finish);
    void finish_request();
    void on_fail_unsubmitted(size_t first, const ApiError& error);  // strand
    void abort_in_engine() const;  // every engine request of the stream
    // Summed over the prompts the engine took (every prompt, unless a batch was refused part-way).
    int64_t prompt_tokens() const;
    int64_t cached_prompt_tokens() const;
    nlohmann::json choices_json() const;  // the non-streamed body's choices (best_of applied)
    void arm_timeout();  // strand
    void on_timeout();   // strand: the deadline passed before the request finished
    // A stream chunk: with continuous_usage_stats its usage so far for choice c (vLLM's shape).
    void write_chunk(nlohmann::json chunk, const Choice& c);
    std::string finish_reason_for(const Choice& c, FinishReason r) const;
    void record_metrics_at_finish();
    // The request's timing: the engine's arrival and first scheduling, its completions' earliest
    // first token and latest last token.
    RequestTiming request_timing() const;
    void log_at_finish() const;  // the request-log line (server/request_log.h)

    ServerState& state_;
    std::shared_ptr<Exchange> exchange_;
    GenerationSpec spec_;
    ResponseHeader header_;
    const std::vector<StreamPrompt> prompts_;
    const std::vector<std::string> engine_ids_;  // one a prompt
    const std::chrono::steady_clock::time_point arrival_;

    std::mutex outbox_mu_;
    std::vector<RequestOutput> outbox_;
    bool drain_posted_ = false;

    std::atomic<bool> client_closed_{false};
    std::atomic<bool> submitted_{false};

    // Strand-only state.
    std::vector<Choice> choices_;
    std::vector<int64_t> cached_prompt_tokens_;  // a prompt's prefix-cache hits
    int64_t num_finished_ = 0;
    std::optional<ApiError> failed_;  // fail_unsubmitted's error: the answer once the rest has ended
    size_t submitted_prompts_ = 0;    // prompts the engine took (all but a refused batch's rest)
    bool stream_started_ = false;
    bool done_ = false;
    bool timed_out_ = false;               // answered by on_timeout; the exchange has ended
    std::function<void()> cancel_timeout_;  // the deadline's timer (null: none)
    std::chrono::steady_clock::time_point first_token_time_{};
};

}  // namespace qs

// FakeEngine: a test double of EngineApi with the real engine's threading and contracts (its own
// loop thread, a bounded waiting queue, max running requests, aborts taking effect at the next
// step, a final output for every completion, stop strings cut from the text) but scripted
// outputs: each completion replies with the text of the last "[[reply:TEXT]]" in the prompt
// ("{i}" becomes the completion index), "[[repeat]]" generates until max_tokens, "[[fail]]" ends
// with an engine error, "[[echo_params]]" replies "logit_bias=ID:BIAS,... min_tokens=N" (what
// reached the engine), "[[echo_request]]" replies "priority=P prompt_ids=ID,ID,..."; otherwise "This is a fake reply.". One token per byte of the reply, one
// token per running completion per step. min_tokens holds as in the real engine: before that
// many tokens, an EOS or stop_token_ids token the script would emit becomes '.' instead.
// Memory accounting (live requests, pages in use) lets tests check that aborts free everything.
// Final outputs carry a RequestTiming: arrival when the loop takes the request from its inbox,
// first scheduled when it starts running, token times at the steps that emit them.
// Used by the server tests, the e2e tests and `qwenserve serve --fake-engine`. submit/abort/stats:
// any thread; sinks run on the loop thread.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <vector>

#include "engine/engine_api.h"

namespace qs {

struct FakeEngineOptions {
    std::chrono::microseconds step_interval{1000};
    int64_t max_running = 256;
    int64_t max_waiting = 1024;
    int64_t max_model_len = 4096;
    int64_t page_tokens = 16;
    int64_t num_pages = 65536;
    double load_s = 0.0;          // healthy() stays false this long after construction
    double health_stall_s = 2.0;  // healthy() turns false when no step for this long
    std::vector<int32_t> eos_ids;
    int32_t vocab_size = 0;  // > 0: logit_bias token ids must be below it (as Engine::submit checks)
    // The detokenizer / tokenizer the script uses (required).
    std::function<std::string(int32_t)> token_bytes;
    std::function<std::vector<int32_t>(std::string_view)> encode;
    // Called on the loop thread right before each output reaches its sink (latency probes).
    std::function<void(const RequestOutput&)> on_emit;
};

class FakeEngine final : public EngineApi {
public:
    explicit FakeEngine(FakeEngineOptions options);
    ~FakeEngine() override;  // aborts what is left (every sink gets its final output), joins

    Status submit(GenerationRequest request, OutputSink sink) override;
    void abort(const std::string& request_id) override;
    EngineStats stats() const override;
    bool healthy() const override;
    int64_t max_model_len() const override { return opts_.max_model_len; }

    // Accounting for tests: requests submitted and not yet finished, and KV pages they hold.
    int64_t num_live() const { return num_live_.load(); }
    int64_t num_pages_used() const { return num_pages_used_.load(); }
    int64_t num_aborted() const { return num_aborted_.load(); }
    // Test hook: a wedged loop stops stepping (health must notice).
    void set_wedged(bool wedged) { wedged_ = wedged; }

private:
    struct Completion {
        std::vector<int32_t> reply;  // scripted ids; empty with repeat
        bool repeat = false;
        bool fail = false;
        size_t pos = 0;
        std::string text;   // all generated text so far (stop strings not yet cut)
        size_t sent = 0;    // bytes of text already emitted
        int64_t num_tokens = 0;
        bool finished = false;
        double first_token_s = -1, last_token_s = -1;
    };
    struct Live {
        GenerationRequest request;
        OutputSink sink;
        std::vector<Completion> completions;
        int64_t pages = 0;
        double arrival_s = -1, first_scheduled_s = -1;
    };

    void loop();
    void step();
    void start_request(Live& live);
    // Advances one completion by one token; returns its output.
    RequestOutput advance(Live& live, int32_t index, double now);
    void finish_all(Live& live, FinishReason reason);
    void deliver(Live& live, RequestOutput&& out);

    FakeEngineOptions opts_;
    const std::chrono::steady_clock::time_point start_time_;

    mutable std::mutex inbox_mu_;
    std::condition_variable inbox_cv_;
    std::deque<std::pair<GenerationRequest, OutputSink>> inbox_submits_;
    std::vector<std::string> inbox_aborts_;
    bool stop_ = false;

    // Loop-thread state.
    std::deque<Live> waiting_;
    std::vector<Live> running_;

    std::atomic<int64_t> num_live_{0};
    std::atomic<int64_t> num_queued_{0};  // inbox + waiting
    std::atomic<int64_t> num_running_{0};
    std::atomic<int64_t> num_pages_used_{0};
    std::atomic<int64_t> num_aborted_{0};
    std::atomic<int64_t> prompt_tokens_total_{0};
    std::atomic<int64_t> completion_tokens_total_{0};
    std::atomic<int64_t> steps_total_{0};
    std::atomic<int64_t> last_step_ns_{0};
    std::atomic<int64_t> stalls_total_{0};
    std::atomic<bool> wedged_{false};
    std::atomic<bool> loop_alive_{false};
    mutable std::mutex ids_mu_;
    std::unordered_map<std::string, int> live_ids_;
    std::thread thread_;
};

}  // namespace qs

// What the routes share: options, the engine (null while it loads), the text pipeline, metrics,
// the worker pool, the draining flag and the ids of live generation requests (so that shutdown
// can abort them). Owned by the serve command (or a test); outlives the HTTP server's threads.
// All members are safe to use from any thread.
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_set>
#include <vector>

#include "engine/engine_api.h"
#include "grammar/grammar_compiler.h"
#include "server/image_input.h"
#include "server/metrics.h"
#include "server/text_pipeline.h"
#include "server/worker_pool.h"

namespace qs {

struct ServerOptions {
    std::string host = "127.0.0.1";
    int port = 8000;                      // 0: any free port (tests)
    std::string api_key;                  // empty: no authentication; else required on every route
    bool open_health_metrics = false;     // with api_key: /health, /ping and /metrics answer without it
    std::vector<std::string> served_model_names = {"qwen3.6-35b-a3b"};
    int io_threads = 2;
    int worker_threads = 2;
    size_t max_body_bytes = 8u << 20;     // prompt routes; the others take 4 KiB (request_guard)
    size_t stream_buffer_bytes = 1u << 20;  // per connection: unsent bytes before the request is aborted
    int64_t max_in_flight = 4096;           // generation requests in the HTTP layer; beyond: 503
    double idle_timeout_s = 60.0;           // keep-alive connections waiting for a request
    double write_stall_timeout_s = 30.0;    // a write that makes no progress this long closes the connection
    double shutdown_grace_s = 30.0;         // SIGTERM: in-flight requests get this long to finish
    double request_timeout_s = 0.0;         // > 0: a generation request not finished this long after
                                            // arrival is answered with a timeout error and aborted
    bool log_requests = true;               // one request-log line per request (server/request_log.h)
    bool log_prompts = false;               // ... with the prompt text in it
    bool priority_scheduling = false;       // --scheduling-policy priority: requests' 'priority' is honoured
    ImageInputOptions images;               // where image_url parts may come from, and their limits
};

class ServerState {
public:
    ServerState(ServerOptions options, const TextPipeline* text)
        : options_(std::move(options)), text_(text), workers_(options_.worker_threads) {}

    const ServerOptions& options() const { return options_; }
    const TextPipeline& text() const { return *text_; }
    ServerMetrics& metrics() { return metrics_; }
    WorkerPool& workers() { return workers_; }

    EngineApi* engine() const { return engine_.load(std::memory_order_acquire); }
    void set_engine(EngineApi* engine) { engine_.store(engine, std::memory_order_release); }
    // Structured outputs: the compiler over the model's vocabulary, or null (the fake engine
    // constrains nothing, so requests for it are refused). Set before the engine.
    const grammar::GrammarCompiler* grammars() const { return grammars_.load(std::memory_order_acquire); }
    void set_grammars(const grammar::GrammarCompiler* g) { grammars_.store(g, std::memory_order_release); }

    // Image input: the model's preprocessor and image token, or null (a text-only model: image
    // parts are a 400). Owned by the caller; set before the engine.
    const VisionInput* vision() const { return vision_.load(std::memory_order_acquire); }
    void set_vision(const VisionInput* v) { vision_.store(v, std::memory_order_release); }

    bool draining() const { return draining_.load(); }
    void set_draining() { draining_ = true; }

    void add_live(const std::string& id) {
        std::lock_guard<std::mutex> lock(live_mu_);
        live_.insert(id);
    }
    void remove_live(const std::string& id) {
        std::lock_guard<std::mutex> lock(live_mu_);
        live_.erase(id);
    }
    size_t num_live() {
        std::lock_guard<std::mutex> lock(live_mu_);
        return live_.size();
    }
    // Asks the engine to abort every live generation request (their streams end with "abort").
    void abort_all() {
        std::vector<std::string> ids;
        {
            std::lock_guard<std::mutex> lock(live_mu_);
            ids.assign(live_.begin(), live_.end());
        }
        if (EngineApi* e = engine())
            for (const auto& id : ids) e->abort(id);
    }

private:
    ServerOptions options_;
    const TextPipeline* text_;
    ServerMetrics metrics_;
    std::atomic<EngineApi*> engine_{nullptr};
    std::atomic<const grammar::GrammarCompiler*> grammars_{nullptr};
    std::atomic<const VisionInput*> vision_{nullptr};
    std::atomic<bool> draining_{false};
    std::mutex live_mu_;
    std::unordered_set<std::string> live_;
    WorkerPool workers_;  // last: its threads stop before the rest is destroyed
};

}  // namespace qs

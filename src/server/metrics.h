// Prometheus metrics of the server: counters and fixed-bucket histograms updated with relaxed
// atomics (no locks on the request path), rendered as text exposition format 0.0.4 by GET
// /metrics together with the engine's gauges (EngineStats, read at scrape time).
// Any thread may observe; render may run concurrently (values are eventually consistent).
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "engine/engine_api.h"
#include "server/histogram.h"
#include "server/vllm_metrics.h"

namespace qs {

struct ServerMetrics {
    ServerMetrics();

    Histogram ttft_s;            // arrival → first generated token leaves the server
    Histogram tpot_s;            // per output token after the first
    Histogram e2e_s;             // arrival → last token
    // The engine's RequestTiming of the request (its completions' earliest first token and latest
    // last token): queue (engine arrival → first scheduled, when scheduled), prefill, decode and
    // inference (when a token was produced).
    Histogram queue_s, prefill_s, decode_s, inference_s;
    VllmMetrics vllm;            // the same events under vLLM's names and buckets
    std::atomic<uint64_t> prompt_tokens{0};
    std::atomic<uint64_t> completion_tokens{0};
    // Finished generation requests by how they ended.
    std::atomic<uint64_t> finished_stop{0}, finished_length{0}, finished_tool_calls{0},
        finished_abort{0}, finished_error{0};
    std::atomic<uint64_t> http_requests{0};
    std::atomic<uint64_t> http_4xx{0}, http_5xx{0};
    std::atomic<uint64_t> client_disconnects{0};
    std::atomic<uint64_t> request_timeouts{0};  // ended by --request-timeout-s
    std::atomic<int64_t> in_flight{0};  // generation requests accepted and not finished

    // engine: null while loading. model_name labels the vllm: series.
    std::string render(const EngineStats* engine, const std::string& model_name = "") const;
};

}  // namespace qs

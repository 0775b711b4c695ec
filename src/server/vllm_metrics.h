// The vLLM-named Prometheus series that GET /metrics exports beside the qwenserve_ ones.
// Updated by the HTTP layer (server/generation_stream.cpp) as ServerMetrics is; rendered from
// ServerMetrics' counters and the engine's stats at scrape time. Thread-safe as Histogram is.
#pragma once

#include <string>

#include "engine/engine_api.h"
#include "server/histogram.h"

namespace qs {

struct ServerMetrics;

// The series vLLM exports (vllm/v1/metrics/loggers.py, vLLM 0.10/0.11 names and buckets), so
// that dashboards and alerts written for vLLM work unchanged. Every series carries
// model_name (the first served name) and engine="0". Rendered by ServerMetrics::render.
// The queue, prefill, decode and inference times come from the engine's RequestTiming (vLLM's
// definitions); like vLLM, a completion never scheduled adds no queue time and one without a
// token no prefill, decode or inference time. Not exported: iteration_tokens, request_params_n.
struct VllmMetrics {
    VllmMetrics();
    Histogram ttft_s;                    // vllm:time_to_first_token_seconds
    Histogram itl_s;                     // vllm:inter_token_latency_seconds and the older
                                         // vllm:time_per_output_token_seconds: one per output step
    Histogram request_tpot_s;            // vllm:request_time_per_output_token_seconds: per request
    Histogram e2e_s;                     // vllm:e2e_request_latency_seconds
    Histogram queue_s;                   // vllm:request_queue_time_seconds
    Histogram prefill_s;                 // vllm:request_prefill_time_seconds
    Histogram decode_s;                  // vllm:request_decode_time_seconds (first → last token)
    Histogram inference_s;               // vllm:request_inference_time_seconds
    Histogram request_prompt_tokens;     // vllm:request_prompt_tokens
    Histogram request_generation_tokens; // vllm:request_generation_tokens
    Histogram request_max_tokens;        // vllm:request_params_max_tokens
};

// Appends the vllm: series. engine: null while loading (then the engine gauges are left out).
void render_vllm(std::string& out, const ServerMetrics& m, const EngineStats* engine,
                 const std::string& model_name);

}  // namespace qs

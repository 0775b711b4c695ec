// Histograms and the Prometheus text rendering (see metrics.h).
#include "server/metrics.h"

#include <fmt/format.h>

#include "server/vllm_metrics.h"

namespace qs {

namespace {

std::vector<double> latency_buckets() {
    return {0.001, 0.0025, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75,
            1.0,   2.5,    5.0,   7.5,  10,   20,   40,   80,   160, 320, 640};
}

void counter(std::string& out, const char* name, const char* help, uint64_t v) {
    out += fmt::format("# HELP {0} {1}\n# TYPE {0} counter\n{0} {2}\n", name, help, v);
}

void gauge(std::string& out, const char* name, const char* help, double v) {
    out += fmt::format("# HELP {0} {1}\n# TYPE {0} gauge\n{0} {2}\n", name, help, v);
}

}  // namespace

ServerMetrics::ServerMetrics()
    : ttft_s(latency_buckets()),
      tpot_s(latency_buckets()),
      e2e_s(latency_buckets()),
      queue_s(latency_buckets()),
      prefill_s(latency_buckets()),
      decode_s(latency_buckets()),
      inference_s(latency_buckets()) {}

std::string ServerMetrics::render(const EngineStats* e, const std::string& model_name) const {
    auto ld = [](const std::atomic<uint64_t>& a) { return a.load(std::memory_order_relaxed); };
    std::string out;
    out.reserve(8192);
    if (e) {
        gauge(out, "qwenserve_num_requests_running", "Requests in the engine's running batch.", double(e->num_running));
        gauge(out, "qwenserve_num_requests_waiting", "Requests in the engine's waiting queue.", double(e->num_waiting));
        gauge(out, "qwenserve_kv_cache_usage_ratio", "Fraction of KV-cache pages in use.", e->kv_usage);
        gauge(out, "qwenserve_state_slot_usage_ratio", "Fraction of GDN state slots in use.", e->state_slot_usage);
        gauge(out, "qwenserve_kv_cache_pages_in_use", "KV-cache pages owned by sequences (cached-only pages not counted).",
              double(e->kv_pages_in_use));
        gauge(out, "qwenserve_state_slots_in_use", "GDN state slots held by running sequences.",
              double(e->state_slots_in_use));
        const double hit = e->prefix_cache_queries > 0 ? double(e->prefix_cache_hits) / double(e->prefix_cache_queries) : 0.0;
        gauge(out, "qwenserve_prefix_cache_hit_rate", "Prompt tokens served from the prefix cache / looked up.", hit);
        counter(out, "qwenserve_prefix_cache_queries_total", "Prompt tokens looked up in the prefix cache.", uint64_t(e->prefix_cache_queries));
        counter(out, "qwenserve_prefix_cache_hits_total", "Prompt tokens served from the prefix cache.", uint64_t(e->prefix_cache_hits));
        counter(out, "qwenserve_prefix_cache_hash_mismatches_total",
                "Prefix-cache page keys that matched a page of another prefix (refused: tokens compared).",
                uint64_t(e->prefix_cache_hash_mismatches));
        const double acc = e->mtp_draft_tokens > 0 ? double(e->mtp_accepted_tokens) / double(e->mtp_draft_tokens) : 0.0;
        gauge(out, "qwenserve_mtp_acceptance_rate", "MTP draft tokens accepted / drafted.", acc);
        counter(out, "qwenserve_mtp_draft_tokens_total", "MTP draft tokens proposed.", uint64_t(e->mtp_draft_tokens));
        counter(out, "qwenserve_mtp_accepted_tokens_total", "MTP draft tokens accepted.", uint64_t(e->mtp_accepted_tokens));
        counter(out, "qwenserve_num_preemptions_total", "Requests preempted by the scheduler.", uint64_t(e->num_preemptions_total));
        counter(out, "qwenserve_engine_steps_total", "Engine loop steps.", uint64_t(e->steps_total));
        out += "# HELP qwenserve_engine_step_seconds_total Engine-thread seconds in steps, by kind (prefill: the step "
               "carries prompt rows; decode: only decode and MTP-verify rows).\n"
               "# TYPE qwenserve_engine_step_seconds_total counter\n";
        out += fmt::format("qwenserve_engine_step_seconds_total{{kind=\"prefill\"}} {}\n", e->step_seconds_prefill);
        out += fmt::format("qwenserve_engine_step_seconds_total{{kind=\"decode\"}} {}\n", e->step_seconds_decode);
        out += "# HELP qwenserve_engine_steps_by_kind_total Engine steps by kind (as qwenserve_engine_step_seconds_total).\n"
               "# TYPE qwenserve_engine_steps_by_kind_total counter\n";
        out += fmt::format("qwenserve_engine_steps_by_kind_total{{kind=\"prefill\"}} {}\n", e->steps_prefill);
        out += fmt::format("qwenserve_engine_steps_by_kind_total{{kind=\"decode\"}} {}\n", e->steps_decode);
        out += "# HELP qwenserve_engine_step_rows_total Forward rows by kind: prompt rows (prompt chunks, recomputes) "
               "and decode rows (one per decoding sequence, 1 + k per MTP verify).\n"
               "# TYPE qwenserve_engine_step_rows_total counter\n";
        out += fmt::format("qwenserve_engine_step_rows_total{{kind=\"prompt\"}} {}\n", e->prompt_rows_total);
        out += fmt::format("qwenserve_engine_step_rows_total{{kind=\"decode\"}} {}\n", e->decode_rows_total);
        gauge(out, "qwenserve_engine_last_step_age_seconds", "Seconds since the engine loop last made progress.", e->last_step_age_s);
        gauge(out, "qwenserve_engine_stalled",
              "1 while the engine loop has not come round within --engine-stall-timeout-s (GET /health answers 503).",
              e->stalled ? 1.0 : 0.0);
        counter(out, "qwenserve_engine_stalls_total", "Engine loop stalls, counted when the loop comes round again.",
                uint64_t(e->stalls_total));
    }
    counter(out, "qwenserve_prompt_tokens_total", "Prompt tokens of finished requests.", ld(prompt_tokens));
    counter(out, "qwenserve_generation_tokens_total", "Generated tokens.", ld(completion_tokens));
    out += "# HELP qwenserve_request_success_total Finished generation requests by finish reason.\n"
           "# TYPE qwenserve_request_success_total counter\n";
    out += fmt::format("qwenserve_request_success_total{{finished_reason=\"stop\"}} {}\n", ld(finished_stop));
    out += fmt::format("qwenserve_request_success_total{{finished_reason=\"length\"}} {}\n", ld(finished_length));
    out += fmt::format("qwenserve_request_success_total{{finished_reason=\"tool_calls\"}} {}\n", ld(finished_tool_calls));
    out += fmt::format("qwenserve_request_success_total{{finished_reason=\"abort\"}} {}\n", ld(finished_abort));
    out += fmt::format("qwenserve_request_success_total{{finished_reason=\"error\"}} {}\n", ld(finished_error));
    counter(out, "qwenserve_http_requests_total", "HTTP requests received.", ld(http_requests));
    out += "# HELP qwenserve_http_errors_total HTTP error responses by class.\n# TYPE qwenserve_http_errors_total counter\n";
    out += fmt::format("qwenserve_http_errors_total{{class=\"4xx\"}} {}\n", ld(http_4xx));
    out += fmt::format("qwenserve_http_errors_total{{class=\"5xx\"}} {}\n", ld(http_5xx));
    counter(out, "qwenserve_client_disconnects_total", "Generation requests whose client went away first.", ld(client_disconnects));
    counter(out, "qwenserve_request_timeouts_total",
            "Generation requests ended by --request-timeout-s (answered with a request_timeout error).",
            ld(request_timeouts));
    gauge(out, "qwenserve_num_requests_in_flight", "Generation requests accepted by the HTTP layer and not finished.",
          double(in_flight.load(std::memory_order_relaxed)));
    ttft_s.render(out, "qwenserve_time_to_first_token_seconds", "Time to first token.");
    tpot_s.render(out, "qwenserve_time_per_output_token_seconds", "Time per output token after the first.");
    e2e_s.render(out, "qwenserve_e2e_request_latency_seconds", "End-to-end request latency.");
    queue_s.render(out, "qwenserve_request_queue_time_seconds", "Engine arrival to first scheduled step.");
    prefill_s.render(out, "qwenserve_request_prefill_time_seconds", "First scheduled step to first token.");
    decode_s.render(out, "qwenserve_request_decode_time_seconds", "First token to last token.");
    inference_s.render(out, "qwenserve_request_inference_time_seconds", "First scheduled step to last token.");
    render_vllm(out, *this, e, model_name);
    return out;
}

}  // namespace qs

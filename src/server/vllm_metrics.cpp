// The vllm: series (see vllm_metrics.h). Names, types, label names and buckets follow vLLM's
// PrometheusStatLogger (vLLM 0.10/0.11); the values come from the same events and engine
// stats as the qwenserve_ series.
#include "server/vllm_metrics.h"

#include <initializer_list>

#include <fmt/format.h>

#include "server/metrics.h"

namespace qs {

namespace {

// The model's longest context (262,144 tokens): the token-count buckets end at 200,000.
constexpr double kMaxTokenBucket = 262144;

std::vector<double> ttft_buckets() {
    return {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75,
            1.0,   2.5,   5.0,  7.5,  10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0};
}

std::vector<double> itl_buckets() {
    return {0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5,
            0.75, 1.0,   2.5,  5.0,   7.5, 10.0, 20.0, 40.0, 80.0};
}

std::vector<double> request_latency_buckets() {
    return {0.3,  0.5,  0.8,  1.0,  1.5,  2.0,   2.5,   5.0,   10.0,  15.0,  20.0,
            30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0};
}

// A label value in the exposition format: backslash, double quote and newline escaped.
std::string escape_label(const std::string& v) {
    std::string out;
    out.reserve(v.size());
    for (char c : v) {
        if (c == '\\') out += "\\\\";
        else if (c == '"') out += "\\\"";
        else if (c == '\n') out += "\\n";
        else out += c;
    }
    return out;
}

void header(std::string& out, const char* name, const char* type, const char* help) {
    out += fmt::format("# HELP {0} {1}\n# TYPE {0} {2}\n", name, help, type);
}

void sample(std::string& out, const char* name, const std::string& labels, double v) {
    out += fmt::format("{}{{{}}} {}\n", name, labels, v);
}

// Series with no labels but `labels`: HELP, TYPE and the one sample of each.
struct One {
    const char* name;
    const char* type;
    const char* help;
    double value;
};

void emit(std::string& out, const std::string& labels, std::initializer_list<One> series) {
    for (const One& o : series) {
        header(out, o.name, o.type, o.help);
        sample(out, o.name, labels, o.value);
    }
}

}  // namespace

VllmMetrics::VllmMetrics()
    : ttft_s(ttft_buckets()),
      itl_s(itl_buckets()),
      request_tpot_s(itl_buckets()),
      e2e_s(request_latency_buckets()),
      queue_s(request_latency_buckets()),
      prefill_s(request_latency_buckets()),
      decode_s(request_latency_buckets()),
      inference_s(request_latency_buckets()),
      request_prompt_tokens(one_two_five_buckets(kMaxTokenBucket)),
      request_generation_tokens(one_two_five_buckets(kMaxTokenBucket)),
      request_max_tokens(one_two_five_buckets(kMaxTokenBucket)) {}

void render_vllm(std::string& out, const ServerMetrics& m, const EngineStats* e, const std::string& model_name) {
    auto ld = [](const std::atomic<uint64_t>& a) { return double(a.load(std::memory_order_relaxed)); };
    const std::string labels = fmt::format("model_name=\"{}\",engine=\"0\"", escape_label(model_name));
    if (e) {
        // The engine counts prompt tokens when it admits a request and generated tokens as they
        // are produced, as vLLM's per-iteration counters do.
        emit(out, labels, {
            {"vllm:num_requests_running", "gauge", "Number of requests in model execution batches.", double(e->num_running)},
            {"vllm:num_requests_waiting", "gauge", "Number of requests waiting to be processed.", double(e->num_waiting)},
            {"vllm:kv_cache_usage_perc", "gauge", "KV-cache usage. 1 means 100 percent usage.", e->kv_usage},
            {"vllm:gpu_cache_usage_perc", "gauge",
             "GPU KV-cache usage. 1 means 100 percent usage. DEPRECATED: Use vllm:kv_cache_usage_perc instead.", e->kv_usage},
            {"vllm:prefix_cache_queries_total", "counter", "Prefix cache queries, in terms of number of queried tokens.",
             double(e->prefix_cache_queries)},
            {"vllm:prefix_cache_hits_total", "counter", "Prefix cache hits, in terms of number of cached tokens.",
             double(e->prefix_cache_hits)},
            {"vllm:num_preemptions_total", "counter", "Cumulative number of preemption from the engine.",
             double(e->num_preemptions_total)},
            {"vllm:prompt_tokens_total", "counter", "Number of prefill tokens processed.", double(e->num_prompt_tokens_total)},
            {"vllm:generation_tokens_total", "counter", "Number of generation tokens processed.",
             double(e->num_completion_tokens_total)},
        });
        if (!e->mtp_accepted_by_position.empty()) {  // MTP on: vLLM's spec_decode series
            emit(out, labels, {
                {"vllm:spec_decode_num_drafts_total", "counter", "Number of spec decoding drafts.", double(e->mtp_drafts)},
                {"vllm:spec_decode_num_draft_tokens_total", "counter", "Number of draft tokens.", double(e->mtp_draft_tokens)},
                {"vllm:spec_decode_num_accepted_tokens_total", "counter", "Number of accepted tokens.",
                 double(e->mtp_accepted_tokens)},
            });
            header(out, "vllm:spec_decode_num_accepted_tokens_per_pos_total", "counter",
                   "Accepted tokens per draft position.");
            for (size_t p = 0; p < e->mtp_accepted_by_position.size(); ++p)
                sample(out, "vllm:spec_decode_num_accepted_tokens_per_pos_total",
                       fmt::format("{},position=\"{}\"", labels, p), double(e->mtp_accepted_by_position[p]));
        }
    }
    // vLLM's finish reasons are stop, length, abort and error; an OpenAI "tool_calls" finish is
    // a stop to the engine.
    header(out, "vllm:request_success_total", "counter", "Count of successfully processed requests.");
    sample(out, "vllm:request_success_total", labels + ",finished_reason=\"stop\"", ld(m.finished_stop) + ld(m.finished_tool_calls));
    sample(out, "vllm:request_success_total", labels + ",finished_reason=\"length\"", ld(m.finished_length));
    sample(out, "vllm:request_success_total", labels + ",finished_reason=\"abort\"", ld(m.finished_abort));
    sample(out, "vllm:request_success_total", labels + ",finished_reason=\"error\"", ld(m.finished_error));
    const VllmMetrics& v = m.vllm;
    v.request_prompt_tokens.render(out, "vllm:request_prompt_tokens", "Number of prefill tokens processed.", labels);
    v.request_generation_tokens.render(out, "vllm:request_generation_tokens", "Number of generation tokens processed.", labels);
    v.request_max_tokens.render(out, "vllm:request_params_max_tokens", "Histogram of the max_tokens request parameter.", labels);
    v.ttft_s.render(out, "vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.", labels);
    v.itl_s.render(out, "vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.", labels);
    v.itl_s.render(out, "vllm:time_per_output_token_seconds",
                   "Histogram of time per output token in seconds. DEPRECATED: Use vllm:inter_token_latency_seconds instead.",
                   labels);
    v.request_tpot_s.render(out, "vllm:request_time_per_output_token_seconds",
                            "Histogram of time_per_output_token_seconds per request.", labels);
    v.e2e_s.render(out, "vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.", labels);
    v.queue_s.render(out, "vllm:request_queue_time_seconds", "Histogram of time spent in WAITING phase for request.",
                     labels);
    v.inference_s.render(out, "vllm:request_inference_time_seconds",
                         "Histogram of time spent in RUNNING phase for request.", labels);
    v.prefill_s.render(out, "vllm:request_prefill_time_seconds", "Histogram of time spent in PREFILL phase for request.",
                       labels);
    v.decode_s.render(out, "vllm:request_decode_time_seconds", "Histogram of time spent in DECODE phase for request.",
                      labels);
}

}  // namespace qs

// Benchmark metrics: per-request records from the load generator (bench/loadgen) and the
// arithmetic that turns them into the numbers `vllm bench serve` reports (throughput, TTFT, TPOT,
// ITL, end-to-end latency, percentiles) plus a steady-state throughput and the cost per million
// completion tokens. Pure functions; called on the bench's main thread after a pass has finished.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace qs::bench {

// What one request did. Times are seconds on one monotonic clock, relative to the pass start.
struct RequestRecord {
    double start_s = 0.0;           // request written to the socket
    double ttft_s = -1.0;           // first content chunk after start; < 0: none arrived
    std::vector<double> itl_s;      // gap between each content chunk and the previous one
    double latency_s = 0.0;         // start to the end of the response ([DONE] or failure)
    int64_t prompt_tokens = 0;      // from the usage chunk
    int64_t completion_tokens = 0;  // from the usage chunk (not from counting chunks)
    std::string finish_reason;      // "stop", "length", ...; empty if none was seen
    std::string error;              // empty: no error; else a kind ("connect", "http_503", ...)
    bool done = false;              // the stream ended with "data: [DONE]"
    bool saw_usage = false;         // a chunk carried a usage object
    int64_t num_bad_chunks = 0;     // data lines that were not a JSON object
    int64_t num_error_events = 0;   // data lines carrying an "error" object
    // The completion text, kept only when the output screen is on (LoadgenOptions::keep_text):
    // content + reasoning_content (chat) or text (completions) in arrival order. Bounded: only
    // the last kTextTailBytes are kept once the request ended (up to twice that while it streams;
    // the loop rule looks only at the end); text_bytes counts every byte.
    std::string text_tail;
    int64_t text_bytes = 0;
    bool text_nonblank = false;  // some character other than ASCII whitespace arrived
    // Kept only with LoadgenOptions::keep_full_text (the evals): the whole completion, unbounded,
    // content (chat content or completions text) and reasoning_content apart.
    std::string content;
    std::string reasoning;
    int64_t num_reasoning_chunks = 0;  // content chunks that carried reasoning_content
    int64_t reasoning_tokens = -1;     // usage.completion_tokens_details.reasoning_tokens; -1: absent
};

// Memory bound of RequestRecord::text_tail (4 KiB per request while screening).
inline constexpr size_t kTextTailBytes = 4096;

// Mean, median and percentiles of one quantity (seconds). Percentiles interpolate linearly
// between the closest ranks, as numpy.percentile does (what vllm uses): rank = p/100 * (n-1).
struct Distribution {
    int64_t count = 0;
    double mean = 0, median = 0, p90 = 0, p99 = 0, min = 0, max = 0;
};
Distribution distribution(std::vector<double> values);
double percentile(const std::vector<double>& sorted, double p);

struct Summary {
    int64_t num_requests = 0;    // records given
    int64_t num_completed = 0;   // no error, [DONE] seen: the set every latency metric uses
    int64_t num_incomplete = 0;  // no error but the stream ended without [DONE]
    std::map<std::string, int64_t> errors;  // error kind -> count
    int64_t total_prompt_tokens = 0;        // over completed requests
    int64_t total_completion_tokens = 0;    // over completed requests
    // duration = (latest end of any request) - (earliest start of any request).
    double duration_s = 0;
    double request_throughput = 0;  // completed / duration
    double output_throughput = 0;   // total_completion_tokens / duration
    // Steady state (see metrics.cpp for the window): completion tokens arriving in
    // [steady_begin_s, steady_end_s] / its length. steady_valid false when the window is empty.
    bool steady_valid = false;
    double steady_begin_s = 0, steady_end_s = 0;
    double steady_output_throughput = 0;
    // Streaming requests: completed requests between their first content chunk and their end
    // (the server's decoding batch, seen from the client). Mean: the time average over the
    // duration (sum of latency − TTFT over the duration); peak: the most at once. A pass whose mean
    // stays well below its peak ran part of its time on a small batch (e.g. the last wave of a
    // pass that queues every request at once).
    double mean_streaming = 0;
    int64_t peak_streaming = 0;
    Distribution ttft, tpot, itl, e2el;
};

// concurrency: the offered number of clients (the ramp-up ends when that many have started).
Summary summarize(const std::vector<RequestRecord>& records, int64_t concurrency);

// $ per million completion tokens: hourly × 1e6 / (tokens_per_s × 3600); 0 if tokens_per_s <= 0.
double cost_per_million_tokens(double hourly_cost, double tokens_per_s);

}  // namespace qs::bench

// The load generator: keeps `clients` HTTP/1.1 keep-alive connections busy, each sending the next
// fixture request as soon as its previous response ended (closed loop), or sends each request at
// its arrival time whatever the others are doing (open loop, LoadgenOptions::arrivals), streaming with
// stream_options.include_usage, and records what each request did (bench/metrics.h). Asio lives
// only in loadgen.cpp; this header hides it. run_pass() blocks the caller (the bench main thread)
// while `threads` I/O threads, each with its own io_context, run the clients as coroutines.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "bench/fixtures.h"
#include "bench/metrics.h"
#include "core/status.h"

namespace qs::bench {

struct Url {
    std::string host;
    int port = 80;
};
// "http://host:port" (a trailing "/" or "/v1" is ignored; https is not supported).
Result<Url> parse_url(const std::string& url);

struct LoadgenOptions {
    Url url;
    std::string api_key;        // sent as "Authorization: Bearer <key>" when not empty
    int64_t clients = 1;        // requests in flight (the offered concurrency)
    int64_t requests = 1;       // per pass; request i is fixture[i % fixture.size()]
    int threads = 1;            // I/O threads; clients are spread over them
    double pass_timeout_s = 0;  // > 0: requests still open then are cut (recorded incomplete)
    bool keep_text = false;     // keep each completion's text tail (the output screen needs it)
    bool keep_full_text = false;  // keep each completion's whole content and reasoning (evals)
    // Open loop when not empty: request i is sent arrivals[i] seconds after the pass starts
    // (bench/arrivals.h; one entry per request), whether or not earlier ones have finished.
    // `clients` then caps the requests in flight: one that arrives at the cap waits for a
    // connection to come free, and its record starts when it is sent.
    std::vector<double> arrivals;
};

struct PassResult {
    std::vector<RequestRecord> records;  // index i: request i
    double wall_s = 0;
};

Result<PassResult> run_pass(const LoadgenOptions& options,
                            const std::vector<FixtureRequest>& fixture);

}  // namespace qs::bench

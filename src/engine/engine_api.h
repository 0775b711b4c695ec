// EngineApi: what the HTTP server (and the batch CLI) need from an engine. The real engine runs
// its loop on its own thread; submit/abort/stats may be called from any thread and never block
// on a forward. Outputs are delivered to a per-request sink, called on the engine thread: a sink
// must only enqueue and return (never block, never call back into the engine).
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "engine/request.h"

namespace qs {

// Receives a request's outputs in order; the last one has finish_reason != kNone for every
// completion index. Called on the engine thread.
using OutputSink = std::function<void(RequestOutput&&)>;

struct EngineStats {
    int64_t num_running = 0;
    int64_t num_waiting = 0;
    int64_t num_prompt_tokens_total = 0;
    int64_t num_completion_tokens_total = 0;
    int64_t num_preemptions_total = 0;
    double kv_usage = 0.0;            // fraction of KV pages in use
    double state_slot_usage = 0.0;    // fraction of GDN state slots in use
    int64_t kv_pages_in_use = 0;      // KV pages owned by sequences (cached-only pages not counted)
    int64_t state_slots_in_use = 0;   // running GDN state slots held by sequences
    int64_t prefix_cache_queries = 0; // prompt tokens looked up
    int64_t prefix_cache_hits = 0;    // prompt tokens served from cache
    int64_t prefix_cache_hash_mismatches = 0;  // page keys that matched another prefix's page (refused)
    int64_t mtp_draft_tokens = 0;
    int64_t mtp_accepted_tokens = 0;
    int64_t mtp_drafts = 0;                        // drafts proposed (sequence-steps with a draft)
    // Verified sequences that accepted every draft and took their spare slot instead of a GDN
    // commit (--mtp-spare-slots); 0 when the mode is off.
    int64_t mtp_spare_slot_swaps = 0;
    std::vector<int64_t> mtp_accepted_by_position; // [num_speculative_tokens]; empty without MTP
    int64_t steps_total = 0;
    // Where the engine thread's step time goes, by step kind: a "prefill" step carries prompt rows
    // (prompt chunks, or a preempted sequence's recompute) beside any decodes; a "decode" step only
    // decode and MTP-verify rows. Seconds are the engine thread's wall time in step() (scheduling,
    // the forward, sampling and outputs); rows are the forward's rows of each kind.
    double step_seconds_prefill = 0.0;
    double step_seconds_decode = 0.0;
    int64_t steps_prefill = 0;
    int64_t steps_decode = 0;
    int64_t prompt_rows_total = 0;
    int64_t decode_rows_total = 0;
    double last_step_age_s = 0.0;     // seconds since the loop last made progress or idled
    // Watchdog (--engine-stall-timeout-s): the loop has not come round for longer than the
    // timeout (a step that long, or a loop that stopped); and the stalls seen so far (each
    // counted when the loop comes round again).
    bool stalled = false;
    int64_t stalls_total = 0;
};

class EngineApi {
public:
    virtual ~EngineApi() = default;

    // Queues a request. Errors: kInvalidArgument (bad params, prompt longer than max_model_len,
    // duplicate id), kResourceExhausted (waiting queue full: retry later).
    virtual Status submit(GenerationRequest request, OutputSink sink) = 0;
    // Aborts a request (its sink gets a final kAbort output). Unknown or finished ids are ignored.
    virtual void abort(const std::string& request_id) = 0;
    virtual EngineStats stats() const = 0;
    // True while the loop is alive and not stalled: it comes round between steps and, idle, every
    // 100 ms or so; a loop that has not come round within the stall timeout (a step that long, a
    // wedged thread) makes it false, and GET /health answers 503.
    virtual bool healthy() const = 0;
    virtual int64_t max_model_len() const = 0;
};

}  // namespace qs

// Sequence: one completion being generated (a request with n > 1 has n of them, forked after the
// shared prompt is computed). It owns its KV pages and GDN state slot while running; preemption
// gives both back and the sequence later recomputes prompt + output so far. Engine thread only.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "engine/block_pool.h"
#include "engine/request.h"
#include "engine/stop_checker.h"
#include "engine/text_decoder.h"
#include "grammar/grammar_matcher.h"
#include "model/prompt_images.h"

namespace qs {

struct RequestState;

enum class SeqStatus : uint8_t { kWaiting, kRunning, kFinished };

struct Sequence {
    int64_t id = 0;                  // engine-wide, increasing: arrival order (FIFO within priority)
    RequestState* request = nullptr;
    int32_t index = 0;               // which of the request's n completions
    SeqStatus status = SeqStatus::kWaiting;

    std::vector<int32_t> tokens;     // prompt then output
    int64_t num_prompt = 0;
    int64_t num_computed = 0;        // positions [0, num_computed) are in the KV pages and GDN state
    int64_t num_cached_prompt = 0;   // prompt tokens restored from the prefix cache
    std::vector<int32_t> block_table;
    std::vector<PrefixPage> prefix_pages;  // each full page registered so far (prefix cache)
    int32_t slot = -1;               // GDN state slot while running

    uint64_t sample_key = 0;         // its sampling noise stream (sampling_key)
    std::unique_ptr<StreamDecoder> decoder;
    std::unique_ptr<StopChecker> stop;
    std::vector<int32_t> draft;      // MTP proposals for the positions after tokens.back()
    // Structured outputs: the request's grammar state (null: unconstrained), and whether it
    // constrains the next token yet (GenerationRequest::grammar_after_token). Such a sequence
    // never drafts: its drafts would need the matcher's masks for every verify row.
    std::unique_ptr<grammar::GrammarMatcher> matcher;
    bool grammar_active = false;
    int32_t pending_index = -1;      // this step's output slot in the engine, or -1
    RequestTiming timing;            // reported with its final output

    int64_t num_output() const { return int64_t(tokens.size()) - num_prompt; }
    // Tokens known but not yet computed (prompt left to prefill, or the last sampled token).
    int64_t num_uncomputed() const { return int64_t(tokens.size()) - num_computed; }
};

// A request and its completions.
struct RequestState {
    GenerationRequest request;
    std::function<void(RequestOutput&&)> sink;
    std::vector<std::unique_ptr<Sequence>> seqs;  // seqs[0] first; the rest forked after prefill
    int64_t num_finished = 0;
    bool forked = false;
    std::vector<uint64_t> sibling_keys;  // [n] sampling keys of the completions, made at the fork
    // With images (Engine::submit made both): the tower's embeddings and the M-RoPE positions of
    // the prompt, and its prefix-cache key (engine/image_cache_key.h). Null / empty: text only.
    std::shared_ptr<const PromptImages> images;
    std::vector<int32_t> cache_key;
};

}  // namespace qs

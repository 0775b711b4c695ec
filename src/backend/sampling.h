// Sampling as a backend op: the batch of draws one step asks for and what comes back. The
// logits stay in the backend's memory; only [rows] tokens and [rows, N ≤ 20] logprobs return.
// Plain data, no engine types: the engine fills a SamplingBatch from its requests.
//
// The contract, for one SampleRow over its logits row l (V floats), in this order:
//  1. Raw logprobs (num_top_logprobs >= 0): lse = log Σ exp(l); later, the drawn token's
//     l[token] - lse and the N largest l (ties: lower id first), each minus lse. Always from
//     the model's raw logits, before any of the changes below (vLLM's raw_logprobs).
//  2. Adjustments, in place on the logits row, when `adjusts_row` (rows sharing a logits row —
//     the n > 1 siblings of a fork — adjust it once): every TokenAdjust entry adds its bias
//     (-inf bans the token: min_tokens); then, over the sequence's history (the tokens at
//     positions [0, history_len), [0, num_prompt) the prompt, read from the cache's token pages
//     through the row's block table), the repetition penalty once per distinct token of prompt
//     or output (l > 0 ? l / r : l * r), the presence penalty once per distinct output token
//     (l -= presence), and the frequency penalty once per output occurrence (l -= frequency,
//     applied n times for n occurrences). Last, a row with a bitmask (structured outputs: the
//     tokens its grammar allows next) sets every token whose bit is 0 to -inf (-inf stays -inf
//     under the bias and the penalties, so the order is immaterial). Raw logprobs (step 1) are
//     unaffected, and the drawn token is always one the mask allows.
//  3. Greedy (temperature 0 or top_k 1): token = argmax l, the lowest id on ties.
//  4. Otherwise s = l * float(1 / temperature) and m = max s. The kept set is
//     {s >= τ} ∩ {exp(s - m) >= min_p}, where τ = max(τ_k, τ_p): τ_k is the top_k-th largest s
//     (ties at the boundary are all kept), and τ_p the largest value v with
//     Σ_{s_i >= max(v, τ_k)} w_i >= top_p · Σ_{s_i >= τ_k} w_i, where w_i = exp(s_i - m) in
//     fixed point (round(w_i · 2^32) as an integer, so sums do not depend on order). The token
//     is argmax over kept i of s_i + g_i (double), g_i = sampling_gumbel(seed, draw, i): a draw
//     from softmax(s) restricted to the kept set and renormalised (the Gumbel-max trick).
//  5. accepted = (draft >= 0 && token == draft). With a point-mass draft (MTP drafts greedily)
//     this is the standard speculative rule: the draft is accepted with probability p(draft),
//     and a rejected row's token is distributed as p with the draft's mass removed.
// Because the noise of a row is a function of (seed, draw) only, a sequence's tokens do not
// depend on what it is batched with, nor on whether MTP verifies them or plain decoding
// samples them (draw = the completion position).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "backend/upload_memory.h"
#include "core/host_device.h"

namespace qs {

inline constexpr int32_t kMaxTopLogprobs = 20;

// An additive change to one token's logit (logit_bias), or a ban (bias = -inf).
struct TokenAdjust {
    int32_t token;
    float bias;
};

struct SampleRow {
    int32_t logits_row = 0;          // row of the [rows, V] logits buffer
    float temperature = 0.0f;        // 0: greedy
    int32_t top_k = 0;               // 0: off
    float top_p = 1.0f;              // 1: off
    float min_p = 0.0f;              // 0: off
    float repetition_penalty = 1.0f; // 1: off
    float presence_penalty = 0.0f;
    float frequency_penalty = 0.0f;
    uint64_t seed = 0;               // the completion's noise stream
    uint64_t draw = 0;               // the completion position being drawn
    int32_t draft = -1;              // MTP draft judged by this row, or -1
    int32_t num_top_logprobs = -1;   // -1: no logprobs; else N in [0, kMaxTopLogprobs]
    bool adjusts_row = true;         // applies steps 2's changes to its logits row
    int32_t adjust_begin = 0, adjust_end = 0;  // its entries of SamplingBatch::adjust
    // History for the penalties (used when a penalty is set): positions [0, history_len) are in
    // the cache's token pages listed at SamplingBatch::block_tables[table_begin ...].
    int32_t history_len = 0;
    int32_t num_prompt = 0;
    int32_t table_begin = 0;
    // Structured outputs: row of SamplingBatch::bitmask allowing the next tokens, or -1 (none).
    // The mask must allow at least one token below V.
    int32_t bitmask_row = -1;

    // Host and device (the CUDA kernels read SampleRows as they are).
    QS_HD bool greedy() const { return temperature == 0.0f || top_k == 1; }
    QS_HD bool has_penalties() const {
        return repetition_penalty != 1.0f || presence_penalty != 0.0f || frequency_penalty != 0.0f;
    }
    QS_HD bool adjusts() const {
        return adjusts_row && (adjust_end > adjust_begin || has_penalties() || bitmask_row >= 0);
    }
};

// Words of one bitmask row: bit t % 32 of word t / 32 is token t (xgrammar's layout).
QS_HD int64_t bitmask_words(int64_t V) { return (V + 31) / 32; }
QS_HD bool bitmask_allows(const uint32_t* row, int64_t t) { return (row[t >> 5] >> (t & 31)) & 1u; }

struct SamplingBatch {
    std::vector<SampleRow> rows;
    std::vector<TokenAdjust> adjust;       // per row, unique tokens
    std::vector<int32_t> block_tables;     // concatenated page ids of the rows with penalties
    // [rows with a mask, bitmask_words(V)] allowed tokens. resize() leaves new words unset
    // (upload_memory.h); the engine's lives in the backend's UploadMemory (Ops::upload_memory).
    std::vector<uint32_t, UploadAllocator<uint32_t>> bitmask;

    void clear() {
        rows.clear();
        adjust.clear();
        block_tables.clear();
        bitmask.clear();
    }
};

// Per row of the batch (host memory).
struct SampleOutput {
    std::vector<int32_t> token;
    std::vector<uint8_t> accepted;
    std::vector<float> logprob;        // raw logprob of `token` (rows asking for logprobs)
    std::vector<int32_t> top_ids;      // [rows, kMaxTopLogprobs]; the first N of a row are used
    std::vector<float> top_logprobs;   // [rows, kMaxTopLogprobs]

    void resize(size_t rows) {
        token.resize(rows);
        accepted.resize(rows);
        logprob.resize(rows);
        top_ids.resize(rows * kMaxTopLogprobs);
        top_logprobs.resize(rows * kMaxTopLogprobs);
    }
};

}  // namespace qs

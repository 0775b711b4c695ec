// EngineConfig: every runtime knob of the serving engine with its default, bound to CLI flags
// (--max-num-seqs) and QS_* environment variables (QS_MAX_NUM_SEQS). The options themselves
// (names, kinds, ranges, help) are declared once in config/engine_options; this file binds them
// to fields, and is the one place they are parsed (from_args) and validated (validate).
// Derived sizes (KV pages, state slots, max_model_len) are computed in one place: plan_capacity().
#pragma once

#include <cstdint>
#include <set>
#include <string>

#include "backend/model_cache.h"
#include "config/model_config.h"
#include "core/args.h"

namespace qs {

struct EngineConfig {
    int64_t max_num_seqs = 512;              // resident (running) sequences = GDN state slots
    int64_t max_num_batched_tokens = 16384;  // rows per forward step
    // Latency policy: prompt rows per step while any sequence decodes (0: no cap beyond the
    // step budget). Bounds the step every decoding stream waits on.
    int64_t max_prefill_tokens_with_decodes = 0;
    int64_t max_model_len = 0;               // 0: the model's max_position_embeddings, capped by memory
    int64_t kv_block_size = 16;              // tokens per KV page
    KvCacheDtype kv_cache_dtype = KvCacheDtype::kBF16;  // every command's default, on every device
    bool gdn_state_bf16 = false;             // --gdn-state-dtype bf16 (GPU): recurrent state in bf16
    bool enable_chunked_prefill = true;
    bool enable_prefix_caching = true;
    bool mtp_overlap = true;  // --no-mtp-overlap: the last draft argmax of a step is not deferred
    int64_t max_waiting = 4096;              // bounded waiting queue: beyond it submit() says retry
    int64_t num_speculative_tokens = 0;      // MTP proposals per step, 0..3
    // MTP drafts only while at most this many sequences are running (0: always). The MTP
    // catch-up still runs (without its lm_head), so the MTP layer's K/V stay current.
    int64_t speculative_disable_by_batch_size = 0;
    // MTP drafts over token ids [0, speculative_draft_vocab) only (0: the whole vocabulary):
    // ForwardBatch::argmax_vocab of the draft forwards. At most the model's vocab_size (Engine).
    int64_t speculative_draft_vocab = 0;
    int64_t grammar_mask_threads = 0;        // fill grammar masks on this many threads; 0: hardware (<= 16)
    int64_t num_state_snapshots = 0;         // prefix-cache GDN snapshots; 0: max(4, max_num_seqs / 4)
    // MTP verification, spare-slot mode: up to this many verified sequences per step also get the
    // GDN state after their last draft in a spare slot (SeqSpan::spare_slot), taken on a full
    // acceptance instead of a GDN commit. 0: off (today's commit of the accepted drafts).
    int64_t mtp_spare_slots = 0;
    int64_t cache_memory_mb = 256;           // KV + state budget (CPU backend; GPU derives it)
    double gpu_memory_utilization = 0.90;    // GPU: share of device memory in use once the cache is made
    int64_t num_kv_blocks = 0;               // 0: derived from cache_memory_mb
    int64_t prefix_cache_seed = -1;          // page hash seed; -1: random per process (CacheManager)
    // Watchdog: the loop not coming round for this long (one step that long, or a wedged loop)
    // is a stall: healthy() false, /health 503. Longer than the longest legitimate step.
    double engine_stall_timeout_s = 120.0;
    // BENCHMARK ONLY, CHANGES OUTPUTS (--benchmark-mtp-acceptance P): each MTP draft is accepted
    // with probability P whatever the target says, so MTP can be timed at a chosen acceptance
    // on dummy weights. -1: off (the real verdicts).
    double benchmark_mtp_acceptance = -1.0;
    // max_num_seqs came from --max-num-seqs / QS_MAX_NUM_SEQS; otherwise fitted() may lower it.
    bool max_num_seqs_set = false;

    // Every range of the option table plus the rules between knobs; the message names the knob.
    Status validate() const;
    std::string describe() const;  // one line, for the start-up log

    // Option names for Args::parse (the option table's), and reading them back (validated).
    static const std::set<std::string>& flag_options();
    static const std::set<std::string>& valued_options();
    static Result<EngineConfig> from_args(const Args& args);

    // The config to run `model` with: max_num_seqs, unless set explicitly, lowered to
    // fit_max_num_seqs() (logged when it changes). The only place max_num_seqs changes after
    // parsing; lowering it keeps validate() true (every rule bounds it from above).
    EngineConfig fitted(const ModelConfig& model, bool with_mtp) const;
};

const char* kv_cache_dtype_name(KvCacheDtype t);

// What fits in the budget, computed with the GPU's storage sizes (bf16/fp8 KV, fp32 conv window,
// fp32 or bf16 recurrent state).
struct CapacityPlan {
    int64_t num_kv_blocks = 0;
    int64_t kv_capacity_tokens = 0;
    int64_t num_running_slots = 0;   // = max_num_seqs
    int64_t num_snapshot_slots = 0;
    // MTP spare-slot mode: min(mtp_spare_slots, max_num_seqs) with MTP on, else 0. Slot ids after
    // the snapshots'; a full acceptance swaps a running slot with a spare, so the ids mix.
    int64_t num_spare_slots = 0;
    // MTP verification defers the GDN state (SeqSpan::defer_state): the backend stashes every
    // verify row's GDN inputs, max_num_seqs × (k + 1) rows × GDN layers × (conv_dim + 2 ×
    // linear_num_value_heads) fp32, until the accepted drafts are committed.
    size_t mtp_stash_bytes = 0;
    int64_t max_model_len = 0;
    size_t kv_bytes_per_token = 0;
    size_t state_bytes_per_slot = 0;
    size_t total_bytes = 0;

    int64_t total_state_slots() const { return num_running_slots + num_snapshot_slots + num_spare_slots; }
    // The state slots and the MTP stash.
    size_t state_bytes() const { return size_t(total_state_slots()) * state_bytes_per_slot + mtp_stash_bytes; }
    std::string describe() const;
};

// `config` must have passed validate() (from_args and Engine::create check it); errors are what
// the budget cannot hold.
Result<CapacityPlan> plan_capacity(const ModelConfig& model, const EngineConfig& config, bool with_mtp);

// The largest max_num_seqs <= config.max_num_seqs whose GDN state slots (running + snapshots +
// the MTP stash) take at most half of cache_memory_mb, so that the rest holds KV pages. The
// default of 512 is sized for a GPU budget; a CPU budget of a few hundred MB cannot hold 512
// states even for the tiny test model, so EngineConfig::fitted applies this when max_num_seqs
// was not set. Returns config.max_num_seqs when it already fits or num_kv_blocks is fixed; at
// least 1.
int64_t fit_max_num_seqs(const ModelConfig& model, const EngineConfig& config, bool with_mtp);

}  // namespace qs

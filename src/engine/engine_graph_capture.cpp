// Engine::capture_graphs: the backend's CUDA graphs captured at start-up (see engine.h). Graphs
// are keyed by the padded batch shape, the cache and the activation arena's state (the backend's
// forward_graphs.h); running the real steps with internal requests captures exactly the graphs
// that serving replays, MTP's included, with no second code path to keep in step with the first.
#include <fmt/format.h>

#include <algorithm>

#include "core/check.h"
#include "engine/engine.h"

namespace qs {

int64_t Engine::capture_graphs(const std::function<void(const GraphCaptureProgress&)>& on_progress) {
    QS_CHECK_MSG(!running_.load() && requests_.empty(), "Engine::capture_graphs: before start(), with no requests");
    // A step never holds more sequences than `cap`, so the sizes above it are never used, except
    // the first: a batch of `cap` sequences is padded to it (run then with `cap` requests).
    const int64_t cap = std::min(config_.max_num_seqs, config_.max_num_batched_tokens);
    std::vector<int64_t> sizes;  // requests per size
    for (int64_t s : model_->graph_batch_sizes()) {
        sizes.push_back(std::min(s, cap));
        if (s >= cap) break;
    }
    if (sizes.empty()) return 0;
    // Largest first: the activation arena grows to its largest decode shape before the smaller
    // shapes' graphs are keyed by its state.
    std::sort(sizes.rbegin(), sizes.rend());
    // Step 1 prefills the one-token prompts (one row per sequence: the decode shape). With MTP,
    // step 2 verifies 1 + k rows per sequence, commits and catches up; every draft is accepted
    // (force_acceptance: only a sequence that accepted one commits, and the commit graph has the
    // verify's shape whichever commit), and it must not finish the sequences, or the commit and
    // catch-up would run over fewer of them than the verify did. With --mtp-spare-slots the
    // first verify step borrows no spare (it commits: the commit graph) and the later ones do
    // (the spare-slot verify graph, which stashes nothing at k = 1): at least two verify steps
    // run before the requests finish (1 + 2 (k + 1) tokens after the prefill's first).
    const int64_t max_tokens = 2 + 2 * (num_spec_ + 1);
    // With MTP the catch-up and draft graphs read the kept hidden states by address: size them for
    // the largest forward first (a prompt chunk of the whole step budget, or a full verify step).
    if (num_spec_ > 0)
        model_->reserve_mtp_hidden(std::max(config_.max_num_batched_tokens, config_.max_num_seqs * (1 + num_spec_)),
                                  config_.max_num_seqs);
    GraphCaptureProgress p;
    p.total = int64_t(sizes.size());
    for (int64_t s : sizes) {
        for (int64_t i = 0; i < s; ++i) {
            GenerationRequest r;
            r.id = fmt::format("__graph_capture_{}_{}", s, i);
            r.prompt_ids = {0};
            r.params.temperature = 0.0;
            r.params.max_tokens = max_tokens;
            r.params.ignore_eos = true;
            admit(Command{Command::kSubmit, std::move(r), nullptr, {}});
        }
        // Each request takes at most max_tokens steps; a few more would mean a scheduling bug.
        capturing_graphs_ = true;
        capture_verify_steps_ = 0;  // run_batch: the first verify step commits, later ones use spares
        for (int64_t steps = 0; !requests_.empty(); ++steps) {
            QS_CHECK_MSG(steps <= 4 * max_tokens, "Engine::capture_graphs: the internal requests did not finish");
            step();
        }
        capturing_graphs_ = false;
        ++p.done;
        p.batch_size = s;
        if (on_progress) on_progress(p);
    }
    // Serving starts from a clean slate: no counts, no cached prefixes of the internal prompts.
    counters_ = EngineStats{};
    std::fill(mtp_proposed_.begin(), mtp_proposed_.end(), 0);
    std::fill(mtp_accepted_.begin(), mtp_accepted_.end(), 0);
    profile_ = {};
    scheduler_->reset_counters();
    cache_mgr_->clear_prefix_cache();
    publish_stats();
    return p.total;
}

}  // namespace qs

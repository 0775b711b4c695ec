// Engine, the draws of a step: one SampleRow per token to draw (engine/sample_rows), Ops::sample
// over the forward's device logits, and the benchmark-only forced MTP verdicts (see engine.h).
// Engine thread.
#include "engine/engine.h"
#include "engine/sample_rows.h"

#include <cmath>
#include <cstdint>

namespace qs {

void Engine::sample_rows(const SchedulerOutput& sched, const Qwen36Model::Output& out) {
    // One SampleRow per draw: the last row of a prompt or a decode row, every row of a verify
    // (its drafts judged on the backend), and the first tokens of a fork's siblings (from the
    // parent's row). Each draw's noise is keyed by (sequence key, completion position), so the
    // tokens do not depend on the batch, and rows past a rejected draft are simply not used.
    const int64_t V = weights_.config.vocab_size, bs = cache_mgr_->block_size();
    const std::vector<int64_t>& eos = weights_.config.eos_token_ids;
    SamplingBatch& b = sampling_;  // cleared by start_grammar_masks, which holds its masks
    picks_.clear();
    pick_begin_.clear();
    int32_t logits_at = 0;
    finish_grammar_masks();  // add_sample_row reads them
    for (size_t si = 0; si < sched.scheduled.size(); ++si) {
        const ScheduledSeq& ss = sched.scheduled[si];
        Sequence& s = *ss.seq;
        const SamplingParams& p = s.request->request.params;
        pick_begin_.push_back(int32_t(picks_.size()));
        if (!ss.verify) {
            if (s.num_computed + ss.num_tokens != int64_t(s.tokens.size())) continue;  // a prefill chunk
            SampleRowSpec spec;
            spec.logits_row = logits_at++;
            spec.position = int64_t(s.tokens.size()) - 1;
            spec.draw = s.num_output();
            spec.bitmask_row = mask_row_of_[si];  // siblings share it: same state, same row
            spec.bitmask_words = bitmask_words(V);
            if (spec.bitmask_row >= 0) spec.bitmask_allowed = mask_allowed_[size_t(spec.bitmask_row)];
            const int32_t row = int32_t(b.rows.size());
            add_sample_row(b, s, s.sample_key, spec, eos, bs);
            int32_t first_sibling = -1;
            if (p.n > 1 && s.index == 0 && !s.request->forked && s.num_output() == 0) {
                first_sibling = int32_t(b.rows.size());
                spec.adjusts_row = false;  // same history and parameters: the parent's adjustments hold
                for (int32_t i = 1; i < int32_t(p.n); ++i) add_sample_row(b, s, sampling_key_for(s, i), spec, eos, bs);
            }
            picks_.push_back({0, row, false, first_sibling});
            continue;
        }
        QS_CHECK(!s.matcher);  // constrained sequences do not draft
        for (int32_t r = 0; r < ss.num_tokens; ++r) {
            SampleRowSpec spec;
            spec.logits_row = logits_at + r;
            spec.position = s.num_computed + r;
            spec.draw = s.num_output() + r;
            spec.draft = size_t(r) < s.draft.size() ? s.draft[size_t(r)] : -1;  // the last row: the bonus token
            picks_.push_back({0, int32_t(b.rows.size()), false, -1});
            add_sample_row(b, s, s.sample_key, spec, eos, bs);
        }
        logits_at += int32_t(ss.num_tokens);
    }
    pick_begin_.push_back(int32_t(picks_.size()));
    QS_CHECK(out.device_logits != nullptr || b.rows.empty());
    if (!b.rows.empty()) model_->sample(out.device_logits, V, b, *cache_, sampled_);
    for (RowPick& pick : picks_) {
        pick.token = sampled_.token[size_t(pick.sample_row)];
        pick.accepted = sampled_.accepted[size_t(pick.sample_row)] != 0;
    }
    if (capturing_graphs_) force_acceptance(1.0);
    else if (config_.benchmark_mtp_acceptance >= 0.0) force_acceptance(config_.benchmark_mtp_acceptance);
}

void Engine::force_acceptance(double p) {
    // Benchmark only: a draft row accepts its draft with the configured probability, decided by
    // a hash of (sequence key, position), and emits the draft then; a refused draft emits what
    // the target drew. Outputs are no longer the model's.
    // P · 2^64 as an integer; P = 1 would be 2^64, which no uint64 holds (converting it is
    // undefined behaviour, found by UBSan): P >= 1 accepts every draft below instead.
    const uint64_t threshold = p >= 1.0 ? UINT64_MAX : uint64_t(std::ldexp(p, 64));
    for (RowPick& pick : picks_) {
        const SampleRow& r = sampling_.rows[size_t(pick.sample_row)];
        if (r.draft < 0) continue;
        uint64_t h = (r.seed ^ (r.draw * 0x9e3779b97f4a7c15ull)) + 0x632be59bd9b4e019ull;
        h = (h ^ (h >> 30)) * 0xbf58476d1ce4e5b9ull;
        h = (h ^ (h >> 27)) * 0x94d049bb133111ebull;
        h ^= h >> 31;
        pick.accepted = p >= 1.0 || h < threshold;
        if (pick.accepted) pick.token = r.draft;
    }
}

uint64_t Engine::sampling_key_for(const Sequence& parent, int32_t completion_index) {
    // Seeded: a pure function of the request (a sibling that cannot fork now and recomputes its
    // prompt later draws its first token again with the same key). Unseeded: one random key per
    // sibling, made once.
    RequestState& rs = *parent.request;
    if (rs.sibling_keys.empty())
        for (int32_t i = 0; i < int32_t(rs.request.params.n); ++i)
            rs.sibling_keys.push_back(i == 0 ? parent.sample_key : sampling_key(rs.request.params, i));
    return rs.sibling_keys[size_t(completion_index)];
}

}  // namespace qs

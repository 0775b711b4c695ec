// SampleRows from requests (see sample_rows.h).
#include "engine/sample_rows.h"

#include <algorithm>
#include <bit>
#include <random>

#include "core/check.h"
#include "engine/sequence.h"

namespace qs {

namespace {

// Whether the mask (words [0, num_words), `allowed` tokens when known, else -1) allows some
// token outside `tokens`. (Counting is a pass over the row, 31 KB at the model's vocabulary, for
// each of up to 512 rows a step on the engine thread: the fill's count is used when known.)
bool mask_allows_more_than(const uint32_t* mask, int64_t num_words, int64_t allowed,
                           const std::vector<int32_t>& tokens) {
    if (allowed < 0) {
        allowed = 0;
        for (int64_t w = 0; w < num_words; ++w) allowed += std::popcount(mask[w]);
    }
    std::vector<int32_t> listed = tokens;
    std::sort(listed.begin(), listed.end());
    listed.erase(std::unique(listed.begin(), listed.end()), listed.end());
    for (int32_t t : listed)
        if (t >= 0 && t < num_words * 32 && bitmask_allows(mask, t)) --allowed;
    return allowed > 0;
}

}  // namespace

uint64_t sampling_key(const SamplingParams& p, int32_t completion_index) {
    uint64_t seed = p.seed ? *p.seed : (uint64_t(std::random_device{}()) << 32) ^ std::random_device{}();
    // Completions of one request draw from distinct, reproducible streams.
    return seed + 0x632be59bd9b4e019ull * uint64_t(completion_index);
}

void add_sample_row(SamplingBatch& b, const Sequence& s, uint64_t key, const SampleRowSpec& spec,
                    const std::vector<int64_t>& eos_ids, int64_t block_size) {
    const SamplingParams& p = s.request->request.params;
    SampleRow r;
    r.logits_row = spec.logits_row;
    r.temperature = float(p.temperature);
    r.top_k = int32_t(std::min<int64_t>(p.top_k, INT32_MAX));
    r.top_p = float(p.top_p);
    r.min_p = float(p.min_p);
    r.repetition_penalty = float(p.repetition_penalty);
    r.presence_penalty = float(p.presence_penalty);
    r.frequency_penalty = float(p.frequency_penalty);
    r.seed = key;
    r.draw = uint64_t(spec.draw);
    r.draft = spec.draft;
    r.num_top_logprobs = int32_t(p.logprobs);
    r.adjusts_row = spec.adjusts_row;
    r.bitmask_row = spec.bitmask_row;
    r.adjust_begin = r.adjust_end = int32_t(b.adjust.size());
    if (spec.adjusts_row) {
        for (const TokenBias& t : p.logit_bias) b.adjust.push_back({t.token, t.bias});
        if (spec.draw < p.min_tokens) {
            // A ban replaces a bias on the same token (entries stay unique per row).
            auto ban = [&](int32_t token) {
                for (int32_t a = r.adjust_begin; a < int32_t(b.adjust.size()); ++a)
                    if (b.adjust[size_t(a)].token == token) {
                        b.adjust[size_t(a)].bias = -INFINITY;
                        return;
                    }
                b.adjust.push_back({token, -INFINITY});
            };
            std::vector<int32_t> bans;
            if (!p.ignore_eos)
                for (int64_t t : eos_ids) bans.push_back(int32_t(t));
            bans.insert(bans.end(), p.stop_token_ids.begin(), p.stop_token_ids.end());
            if (spec.bitmask_row < 0 ||
                mask_allows_more_than(b.bitmask.data() + int64_t(spec.bitmask_row) * spec.bitmask_words,
                                      spec.bitmask_words, spec.bitmask_allowed, bans))
                for (int32_t t : bans) ban(t);
        }
        r.adjust_end = int32_t(b.adjust.size());
        if (r.has_penalties()) {
            r.history_len = int32_t(spec.position + 1);
            r.num_prompt = int32_t(s.num_prompt);
            r.table_begin = int32_t(b.block_tables.size());
            const int64_t pages = (spec.position + block_size) / block_size;
            QS_CHECK(pages <= int64_t(s.block_table.size()));
            b.block_tables.insert(b.block_tables.end(), s.block_table.begin(), s.block_table.begin() + pages);
        }
    }
    b.rows.push_back(r);
}

}  // namespace qs

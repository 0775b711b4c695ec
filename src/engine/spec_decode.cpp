// MTP draft acceptance (see spec_decode.h).
#include "engine/spec_decode.h"

#include <algorithm>
#include <vector>

namespace qs {

namespace {
bool is_greedy(const SamplingParams& p) { return p.temperature == 0.0 || p.top_k == 1; }
}  // namespace

DraftVerdict verify_draft(const float* logits_in, int64_t vocab, const SamplingParams& p, SamplerState& s,
                          int32_t draft) {
    std::vector<float> penalised;  // only when penalties change the row
    const float* logits = logits_in;
    if (has_penalties(p, s)) {
        penalised.assign(logits_in, logits_in + vocab);
        apply_penalties(penalised.data(), vocab, p, s);
        logits = penalised.data();
    }
    if (is_greedy(p)) {
        const int32_t best = argmax(logits, vocab);
        return {best == draft, best};
    }
    std::vector<float> probs = sampling_distribution(logits, vocab, p);
    if (s.next_uniform() < double(probs[size_t(draft)])) return {true, draft};
    probs[size_t(draft)] = 0.0f;
    double rest = 0.0;
    for (float x : probs) rest += x;
    for (float& x : probs) x = float(x / rest);
    return {false, draw_from(probs, s.next_uniform())};
}

}  // namespace qs

// Comparing a model's outputs with another's (the quantisation tests): the prompt and MTP logits
// of one sequence on the CPU backend, and the measures the tests bound.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "backend/cpu/cpu_ops.h"
#include "model/single_sequence.h"

namespace qs::test {

struct Outputs {
    std::vector<float> logits, mtp;  // [T, vocab] each
};

inline Outputs run_prompt(const ModelWeights& w, const std::vector<int32_t>& ids) {
    CpuOps ops;
    Qwen36Model model(w, ops);
    SingleSequence seq(model, int64_t(ids.size()));
    Outputs o;
    o.logits = seq.feed(ids, true);
    o.mtp = seq.mtp_over_history(0);
    return o;
}

// Fraction of rows whose argmax agrees.
inline double argmax_agreement(const std::vector<float>& a, const std::vector<float>& b, int64_t vocab) {
    int64_t rows = int64_t(a.size()) / vocab, same = 0;
    for (int64_t r = 0; r < rows; ++r) {
        const float* x = a.data() + r * vocab;
        const float* y = b.data() + r * vocab;
        same += std::max_element(x, x + vocab) - x == std::max_element(y, y + vocab) - y;
    }
    return double(same) / double(rows);
}

// Mean next-token negative log-likelihood of ids[1..] under logits rows [0, T-1).
inline double mean_nll(const std::vector<float>& logits, const std::vector<int32_t>& ids, int64_t vocab) {
    double sum = 0;
    for (size_t t = 0; t + 1 < ids.size(); ++t) {
        const float* row = logits.data() + int64_t(t) * vocab;
        const float m = *std::max_element(row, row + vocab);
        double z = 0;
        for (int64_t v = 0; v < vocab; ++v) z += std::exp(double(row[v] - m));
        sum += std::log(z) + m - row[ids[t + 1]];
    }
    return sum / double(ids.size() - 1);
}

inline double rms(const std::vector<float>& a, const std::vector<float>& b) {
    double s = 0;
    for (size_t i = 0; i < a.size(); ++i) s += double(a[i] - b[i]) * double(a[i] - b[i]);
    return std::sqrt(s / double(a.size()));
}

}  // namespace qs::test

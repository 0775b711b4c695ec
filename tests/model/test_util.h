// Helpers shared by the model tests: running sequences, comparing logits.
#pragma once

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

namespace qs::test {

inline float max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
    if (a.size() != b.size()) return INFINITY;
    float m = 0.0f;
    for (size_t i = 0; i < a.size(); ++i) {
        const float d = std::fabs(a[i] - b[i]);
        if (!(d <= m)) m = d;  // NaN propagates as a failure
    }
    return m;
}

inline std::string source_path(const std::string& rel) { return std::string(QS_SOURCE_DIR) + "/" + rel; }

}  // namespace qs::test

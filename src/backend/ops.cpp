// Default implementations of Ops members that are backend-independent (see ops.h).
#include "backend/ops.h"

#include <vector>

namespace qs {

void Ops::argmax_rows(const float* x, int64_t R, int64_t n, int32_t* out) {
    std::vector<float> row(static_cast<size_t>(n));
    for (int64_t r = 0; r < R; ++r) {
        copy_to_host(x + r * n, n, row.data());
        int64_t best = 0;
        for (int64_t i = 1; i < n; ++i)
            if (row[size_t(i)] > row[size_t(best)]) best = i;
        out[r] = int32_t(best);
    }
}

}  // namespace qs

// NullOps (see null_ops.h).
#include "backend/null/null_ops.h"

#include <algorithm>

#include "core/check.h"

namespace qs {

float* NullOps::alloc(int64_t n) {
    // Buffers alias one region: nothing writes them (copy_from_host and every op are no-ops), so
    // it stays zero. A smaller region outgrown mid-forward is kept until free_all(), so no
    // pointer handed out in this forward dangles.
    if (!zeros_ || n > capacity_) {
        if (zeros_) retired_.push_back(std::move(zeros_));
        capacity_ = std::max<int64_t>(n, 1);
        zeros_.reset(static_cast<float*>(std::calloc(size_t(capacity_), sizeof(float))));
        QS_CHECK(zeros_ != nullptr);
    }
    return zeros_.get();
}

// Every buffer holds zeros, so the copy is a fill (the source pages stay untouched).
void NullOps::copy_to_host(const float* src, int64_t n, float* dst) { std::fill_n(dst, n, 0.0f); }

void NullOps::sample(float* logits, int64_t V, const SamplingBatch& batch, ModelCache& cache, SampleOutput& out) {
    out.resize(batch.rows.size());
    for (size_t i = 0; i < batch.rows.size(); ++i) {
        out.token[i] = 0;
        out.accepted[i] = batch.rows[i].draft == 0;
        out.logprob[i] = 0.0f;
    }
}

}  // namespace qs

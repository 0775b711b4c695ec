// Default implementations of Ops members that are backend-independent (see ops.h).
#include "backend/ops.h"

#include <vector>

#include "backend/cpu/cpu_ops.h"

namespace qs {

void Ops::vision_tower(const VisionWeights& w, const float* patches, const std::vector<VisionGrid>& grids, float* out,
                       float* blocks_out) {
    cpu::vision_tower(w, patches, grids, out, blocks_out);
}

void Ops::linears(const float* x, int64_t T, std::initializer_list<LinearOut> outs) {
    for (const LinearOut& o : outs) linear(x, T, o.w, o.y);
}

void Ops::rms_norm_linears(const float* x, const float* pending, const ParamVector& w, int64_t T, int64_t n,
                           double eps, float* h, std::initializer_list<LinearOut> outs) {
    if (pending != nullptr) {
        copy(x, T * n, h);
        add_rms_norm_zc(h, pending, w, T, n, eps, h);  // in place: h keeps only the normalised rows
    } else {
        rms_norm_zc(x, w, T, n, eps, h);
    }
    linears(h, T, outs);
}

void Ops::linear_leading_rows(const float* x, int64_t T, const LinearWeight& w, int64_t rows, float* y) {
    linear(x, T, leading_rows(w, rows), y);
}

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

void Ops::argmax_rows_start(const float* x, int64_t R, int64_t n) {
    started_argmax_.resize(size_t(R));
    argmax_rows(x, R, n, started_argmax_.data());
}

void Ops::argmax_rows_wait(int32_t* out) {
    std::copy(started_argmax_.begin(), started_argmax_.end(), out);
}

void Ops::store_token_ids(const ForwardBatch& batch, const int32_t* positions, ModelCache& cache) {
    int32_t* pages = cache.token_pages();
    if (!pages) return;  // no storage (NullOps)
    const int64_t bs = cache.geometry().block_size;
    for (const SeqSpan& s : batch.seqs)
        for (int32_t r = s.row_begin; r < s.row_begin + s.num_tokens; ++r) {
            const int32_t p = positions[r];
            pages[int64_t(s.block_table[size_t(p / bs)]) * bs + p % bs] = batch.token_ids[size_t(r)];
        }
}

}  // namespace qs

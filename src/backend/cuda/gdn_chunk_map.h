// Which chunk of which sequence a block of the chunk-parallel GDN grids works on (gdn_tc_prep.cu,
// gdn_tc_out.cu, gdn_cp_prep.cu: grid.x = num_seqs + ceil(rows / 64) blocks). Block x belongs to
// the sequence s with the largest key(s) = s + row_begin(s) / 64 <= x, chunk x − key(s) of it (past
// the sequence's end: the block has nothing to do). The kernels used to find s by a binary search
// over DeviceBatch::seqs: ~log2(num_seqs) dependent global loads before a block's first useful
// one, 5–10 % of the prep and output kernels' time at 16 sequences (Nsight Compute, session 32)
// and more in serving steps of ~1,000 sequences. CudaOps::begin_forward writes the answer for
// every block once per forward (DeviceBatch::gdn_chunks); a block reads its entry in one load.
// Included from g++-compiled code: no device-only syntax here.
#pragma once

#include <cstdint>

#include "backend/cuda/device_batch.h"
#include "core/host_device.h"

namespace qs::cuda {

inline int64_t gdn_chunk_blocks(int64_t num_seqs, int64_t rows) { return num_seqs + (rows + 63) / 64; }

// The block's sequence by the search the kernels did (also their fallback without a map): the
// largest s with key(s) <= x (key(0) = 0 <= x), and its chunk x − key(s).
QS_HD GdnChunk gdn_chunk_by_search(const DeviceSeq* seqs, int32_t num_seqs, int32_t x) {
    int lo = 0, hi = num_seqs - 1;
    while (lo < hi) {
        const int mid = (lo + hi + 1) >> 1;
        if (mid + seqs[mid].row_begin / 64 <= x) lo = mid;
        else hi = mid - 1;
    }
    return GdnChunk{lo, x - (lo + seqs[lo].row_begin / 64), seqs[lo].row_begin, seqs[lo].num_tokens};
}

// map[gdn_chunk_blocks(num_seqs, rows)] for the sequences seqs[num_seqs] (num_seqs >= 1).
inline void fill_gdn_chunk_map(const DeviceSeq* seqs, int32_t num_seqs, int64_t rows, GdnChunk* map) {
    const int64_t n = gdn_chunk_blocks(num_seqs, rows);
    for (int64_t x = 0; x < n; ++x) map[x] = gdn_chunk_by_search(seqs, num_seqs, int32_t(x));
}

}  // namespace qs::cuda

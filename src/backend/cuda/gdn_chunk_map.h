// Which chunk of which sequence a block of the chunk-parallel GDN kernels works on (gdn_tc_prep.cu,
// gdn_tc_out.cu, gdn_cp_prep.cu). The chunk key of chunk c of sequence s is key(s) + c with
// key(s) = s + row_begin(s) / 64 (keys strictly increase and key(s) + ceil(n_s / 64) <= key(s+1), so
// chunks never share a key; tcH keeps one chunk-start state per key).
//
// Without a map the grid has a block per key, num_seqs + ceil(rows / 64), and block x finds its
// sequence by a binary search over DeviceBatch::seqs (gdn_chunk_by_search): ~log2(num_seqs)
// dependent global loads before a block's first useful one, and a block for every key that is no
// chunk (every one-row sequence of a serving step's decodes). Nsight Compute (session 32, H100):
// the search was 5 % of the prep's and 10 % of the output kernel's stall samples at 16 × 1,024; in
// a serving step's shape (16 prompts of 1,024 beside 1,024 decoding sequences) the empty blocks cost
// as much as the work. With the map (DeviceBatch::gdn_chunks, written by CudaOps::begin_forward)
// the grid has a block per chunk of the sequences the kernels chunk (num_tokens >= chunk_min), and
// block x reads its entry in one 16-byte load.
// Included from g++-compiled code: no device-only syntax here.
#pragma once

#include <cstdint>

#include "backend/cuda/device_batch.h"
#include "core/host_device.h"

namespace qs::cuda {

// Keys of a batch: the search grid's blocks, and the most entries a map can have.
inline int64_t gdn_chunk_keys(int64_t num_seqs, int64_t rows) { return num_seqs + (rows + 63) / 64; }

// Block x of the search grid: the sequence s with the largest key(s) <= x (key(0) = 0 <= x), chunk
// x − key(s) of it (past the sequence's end: no chunk).
QS_HD GdnChunk gdn_chunk_by_search(const DeviceSeq* seqs, int32_t num_seqs, int32_t x) {
    int lo = 0, hi = num_seqs - 1;
    while (lo < hi) {
        const int mid = (lo + hi + 1) >> 1;
        if (mid + seqs[mid].row_begin / 64 <= x) lo = mid;
        else hi = mid - 1;
    }
    return GdnChunk{x, x - (lo + seqs[lo].row_begin / 64), seqs[lo].row_begin, seqs[lo].num_tokens};
}

// Writes the chunks of the sequences with num_tokens >= chunk_min (> 0), in key order, into
// map[gdn_chunk_keys(num_seqs, rows)] and returns how many; -1 (no map: the kernels search) if some
// chunk's key would not lead the search to it (rows out of order: no batch the engine builds).
inline int32_t fill_gdn_chunk_map(const DeviceSeq* seqs, int32_t num_seqs, int64_t rows, int32_t chunk_min,
                                  GdnChunk* map) {
    if (chunk_min <= 0) return -1;
    int32_t n = 0;
    for (int32_t s = 0; s < num_seqs; ++s) {
        const DeviceSeq& q = seqs[s];
        if (q.num_tokens < chunk_min) continue;
        const int32_t key = s + q.row_begin / 64;
        for (int32_t c = 0; 64 * c < q.num_tokens; ++c) {
            const GdnChunk k{key + c, c, q.row_begin, q.num_tokens};
            const GdnChunk found = gdn_chunk_by_search(seqs, num_seqs, k.key);
            if (k.key >= gdn_chunk_keys(num_seqs, rows) || found.chunk != c || found.row_begin != q.row_begin ||
                found.num_tokens != q.num_tokens)
                return -1;
            map[n++] = k;
        }
    }
    return n;
}

// Writes the indices of the sequences with min_rows <= num_tokens < end_rows, ascending, into
// out[num_seqs] and returns how many (the per-sequence grids' lists below).
inline int32_t fill_gdn_seqs_with_rows(const DeviceSeq* seqs, int32_t num_seqs, int32_t min_rows, int32_t end_rows,
                                       int32_t* out) {
    int32_t n = 0;
    for (int32_t s = 0; s < num_seqs; ++s)
        if (seqs[s].num_tokens >= min_rows && seqs[s].num_tokens < end_rows) out[n++] = s;
    return n;
}

// Writes the indices of the sequences with num_tokens >= chunk_min (> 0), ascending, into
// out[num_seqs] and returns how many (the state pass's grid: a block per chunked sequence instead of
// one per sequence, most of which, in a serving step, are one-row decodes that return at once).
inline int32_t fill_gdn_chunked_seqs(const DeviceSeq* seqs, int32_t num_seqs, int32_t chunk_min, int32_t* out) {
    return chunk_min <= 0 ? 0 : fill_gdn_seqs_with_rows(seqs, num_seqs, chunk_min, INT32_MAX, out);
}

// Writes the indices of the sequences with 2 <= num_tokens < chunk_min (> 0), ascending, into
// out[num_seqs] and returns how many: the token-serial kernel's grid (gdn_serial.cu) in a call whose
// chunked sequences go to the chunk kernels and one-row ones to the warp slices. Without the list that
// kernel has a block per (sequence, value head), and in a serving step nearly all of them are one-row
// decodes that return at once (33 K blocks at 1,040 sequences, ~126 waves at 2 blocks an SM).
inline int32_t fill_gdn_short_seqs(const DeviceSeq* seqs, int32_t num_seqs, int32_t chunk_min, int32_t* out) {
    return chunk_min <= 0 ? 0 : fill_gdn_seqs_with_rows(seqs, num_seqs, 2, chunk_min, out);
}

}  // namespace qs::cuda

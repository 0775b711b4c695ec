// DeviceBatch: the ForwardBatch as the CUDA kernels read it, uploaded once per forward by
// CudaOps::begin_forward into buffers that keep their addresses (so CUDA graphs can replay a
// captured step after new values are copied in). Plain structs, passed by value to kernels.
// Kernel grids may depend on num_tokens/num_seqs (fixed per graph bucket) but never on the
// context lengths, which change every step: read those from `seqs` on the device.
#pragma once

#include <cstdint>

namespace qs::cuda {

struct DeviceSeq {
    int32_t row_begin;          // first row of this sequence in the batch
    int32_t num_tokens;         // rows in this forward
    int32_t start_pos;          // tokens already cached; row i has position start_pos + i
    int32_t state_slot;         // GDN conv + recurrent state slot
    int32_t block_table_begin;  // offset of this sequence's page ids in DeviceBatch::block_tables
    int32_t num_blocks;         // page ids available (cover positions [0, start_pos + num_tokens))
    int32_t defer_state;        // 1: GDN writes the slot's state and conv window after the first row
                                // only (SeqSpan::defer_state, MTP verification; token-serial kernels only)
    int32_t spare_slot;         // with defer_state: also write the state after the last row into this
                                // slot (SeqSpan::spare_slot); -1: none
};

// A chunk of 64 rows for the chunk-parallel GDN kernels: its key (the chunk-start state's index in
// tcH), its index in its sequence, and that sequence's row_begin and num_tokens (gdn_chunk_map.h).
// 16 bytes: one load.
struct alignas(16) GdnChunk {
    int32_t key;
    int32_t chunk;
    int32_t row_begin;
    int32_t num_tokens;
};

struct DeviceBatch {
    const int32_t* token_ids = nullptr;     // [num_tokens]
    const int32_t* positions = nullptr;     // [num_tokens]
    const int32_t* row_seq = nullptr;       // [num_tokens] index into seqs of each row
    const DeviceSeq* seqs = nullptr;        // [num_seqs]
    const int32_t* block_tables = nullptr;  // concatenated page ids of all sequences
    // Rotary positions [3][num_tokens] (t, h, w streams, stream-major: ForwardBatch::
    // rope_positions for M-RoPE batches, the 1-D positions three times otherwise); null: the
    // attention rotates by `positions` in all three streams. Only the attention reads it.
    const int32_t* rope_positions = nullptr;
    // The chunk-parallel GDN kernels' blocks (gdn_chunk_map.h): the gdn_chunk_count chunks of the
    // sequences with num_tokens >= gdn_chunk_min, a block each. Null: a block per key, each
    // searching `seqs` for its chunk (the same chunks).
    const GdnChunk* gdn_chunks = nullptr;
    int32_t gdn_chunk_count = 0;
    int32_t gdn_chunk_min = 0;
    // With gdn_chunks: the indices into seqs of those sequences, ascending (gdn_chunk_seq_count of
    // them): the grid of the kernels that take a block per chunked sequence (the state pass).
    const int32_t* gdn_chunk_seqs = nullptr;
    int32_t gdn_chunk_seq_count = 0;
    // With gdn_chunks: the indices into seqs of the sequences of 2 .. gdn_chunk_min − 1 rows,
    // ascending (gdn_short_seq_count of them): the token-serial kernel's grid beside the chunk
    // kernels and the warp slices (gdn_chunk_map.h fill_gdn_short_seqs).
    const int32_t* gdn_short_seqs = nullptr;
    int32_t gdn_short_seq_count = 0;
    int32_t num_tokens = 0;
    int32_t num_seqs = 0;
    int32_t max_seq_tokens = 0;  // max num_tokens of one sequence (1 for a plain decode batch)
};

// Storage dtype of the paged K/V cache on the device. kF32 is for reference precision only: it
// runs the fp32 fallback attention kernel (attention_fallback.cu), not the tensor-core ones.
enum class DeviceKvDtype : uint8_t { kBF16, kFP8E4M3, kF32 };

// Storage format of a linear layer's weight on the device.
//  kBF16:     w [out, in] bf16 row-major.
//  kFP8Block: w [out, in] fp8 e4m3 row-major + scale_inv [ceil(out/128), ceil(in/128)] fp32;
//             W[r][c] = float(w[r][c]) * scale_inv[r / 128][c / 128]  (Qwen's official FP8).
//  kF32:      w [out, in] fp32 row-major (reference precision, shapes the fast kernels do not tile).
enum class DeviceWeightFormat : uint8_t { kBF16, kFP8Block, kF32 };

}  // namespace qs::cuda

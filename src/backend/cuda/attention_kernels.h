// Gated full attention on the GPU over the paged K/V cache (spec §2.3, §2.7). CUDA twin of
// CpuOps::gated_attention (src/backend/cpu/cpu_attention.cpp). Called by CudaOps from the engine
// thread; the launcher only enqueues work on `stream` (no sync, no allocation: graph-capturable).
//
// Maths per row r (position pos = positions[r], sequence s = seqs[row_seq[r]]), per head:
//   q_j  = rope(rmsnorm_zc(qg[r, j, 0:D], q_norm_w), pos)       j < Hq   (query half of qg)
//   k_h  = rope(rmsnorm_zc(k[r, h], k_norm_w), pos)              h < Hkv
//   cache[page(s, pos), pos % bs, h] = round_kv(k_h), round_kv(v[r, h])
//   out[r, j*D:(j+1)*D] = softmax_p≤pos(q_j · Kcache[p, j/G] / sqrt(D)) · Vcache[p, j/G]
//                         ⊙ sigmoid(qg[r, j, D:2D])                  (G = Hq / Hkv)
//   rmsnorm_zc(x, w) = x / sqrt(mean(x²) + eps) * (1 + w); rope = NeoX rotate-half on the first
//   rotary_dim dims, pairs (i, i + rotary_dim/2), inv_freq_i = theta^(-2i/rotary_dim) (computed on
//   the host in double then rounded to float, as the CPU does), angle = float(pos_i) * inv_freq_i.
//   pos_i = pos for 1-D batches; with M-RoPE (batch.rope_positions set) frequency i takes its
//   position from the t, h or w stream as AttentionDims::mrope_section interleaves them (h when
//   i % 3 == 1 and i < 3·section[1], w when i % 3 == 2 and i < 3·section[2], else t), as
//   CpuOps::gated_attention. The cache slot and the causal bound always follow the 1-D pos.
//   round_kv: bf16 round-to-nearest-even, or fp8 e4m3 satfinite round-to-nearest-even (no scale),
//   which equals core/dtype.cpp f32_to_fp8e4m3.
// Precision: norm, RoPE and softmax in fp32; q·k and p·v on tensor cores with fp32 accumulation;
// q and the softmax weights p are rounded to bf16 (bf16 cache) or f16 (fp8 cache, whose values are
// exact in f16) before the products, as flash attention does. The fallback (D % 32 != 0) keeps q
// and p in fp32.
#pragma once

#include <cstdint>

#include <cuda_runtime.h>

#include "backend/cuda/device_batch.h"

namespace qs::cuda {

// Default cap on split-K partitions of one decode row (work of one row across several blocks).
constexpr int kAttentionMaxSplits = 32;

struct GatedAttentionParams {
    const float* qg = nullptr;        // [T, Hq, 2*D]: per head the query (D) then the output gate (D)
    const float* k = nullptr;         // [T, Hkv, D] projections, before k-norm and RoPE
    const float* v = nullptr;         // [T, Hkv, D]
    const float* q_norm_w = nullptr;  // [D] zero-centred RMSNorm weight (scale 1 + w)
    const float* k_norm_w = nullptr;  // [D]
    void* k_cache = nullptr;          // [num_blocks, block_size, Hkv, D] in kv_dtype
    void* v_cache = nullptr;          // same
    DeviceKvDtype kv_dtype = DeviceKvDtype::kBF16;
    int Hq = 0, Hkv = 0, D = 0, rotary_dim = 0, block_size = 0;
    double rope_theta = 0.0;  // double (not float) so inv_freq is computed exactly as the CPU does
    int mrope_section[3] = {11, 11, 10};  // M-RoPE frequency split; read when batch.rope_positions is set
    float eps = 0.0f;
    DeviceBatch batch;        // row r belongs to seqs[row_seq[r]] at positions[r]; pages via block_tables
    void* workspace = nullptr;  // attention_workspace_bytes(num_tokens, Hq, D, max_splits) bytes
    int max_splits = kAttentionMaxSplits;  // [added] the max_splits the workspace was sized with
    // Sequences with 1..decode_max_rows rows (in [1, 4]; an MTP verify is k + 1 rows) take the
    // split-K decode kernel, each row's keys bounded causally by its own position; longer ones the
    // prefill kernel. 1 (default): only single-row sequences (CudaOptions::attention_decode_rows).
    int decode_max_rows = 1;
    // Decode rows' kernel: 1 (default) the one-warp split-K kernel (attention_decode.cu); 2 the
    // streaming kernel with the keys as the mma's M (attention_decode_v2.cu) wherever the
    // tensor-core kernels run (D % 32 == 0). Same rows, masking, partials and combine
    // (CudaOptions::attention_decode_version).
    int decode_version = 1;
    // Lab-only tuning of version 2 at D 256 (attention_lab --decode): 0 the default warps x ring
    // depth, 1 and 2 alternatives (attention_decode_v2.cu). Not a CudaOptions field.
    int decode_v2_variant = 0;
    // The split-K combine's version (CudaOptions::attention_combine_version). 1 (default) the loop
    // with 8 loads in flight (a round trip per 8 splits and head dim); 2 loads every split's partial
    // of a thread's head dims before the first is added (one round trip per 16 splits). The same
    // sums in the same order: bitwise equal (attention_emu --combine-check; GPU:
    // CudaOpsParity.GatedAttentionDecodeVersions).
    int combine_version = 1;
    float* out = nullptr;     // [T, Hq*D]
    // Prefill rows' kernel: 1 (default) the mma.sync flash attention (attention_prefill.cu); 2 the
    // wgmma/TMA kernel (attention_prefill_wgmma.cu) where attention_prefill_v2_applies(), else 1.
    int prefill_version = 1;
    // Version 2 only: sum over the sequences with >= 2 rows of start_pos + num_tokens (the K/V rows
    // gathered into contiguous bf16), and attention_prefill_v2_workspace_bytes(...) bytes for it.
    int64_t prefill_kv_tokens = 0;
    void* prefill_workspace = nullptr;
};

// Prefill version 2 runs when the batch's longest sequence has at least this many rows (below
// it the gather and launch overheads outweigh the faster products; bench/kernels/NOTES.md).
constexpr int kAttentionV2MinRows = 1024;
// Whether this build has the version-2 kernel (FlashInfer + CUTLASS headers found by CMake:
// scripts/setup_flashinfer.sh).
bool attention_prefill_v2_available();
// Whether launch_gated_attention takes version 2 for the prefill rows: prefill_version == 2,
// available, D == 256, a bf16 or fp8 cache, max_seq_tokens >= kAttentionV2MinRows.
bool attention_prefill_v2_applies(int prefill_version, int D, DeviceKvDtype kv_dtype, int max_seq_tokens);
// Version 2's workspace (bf16 Q and O [T, Hq, D], bf16 K and V [kv_tokens, Hkv, D], the work list).
size_t attention_prefill_v2_workspace_bytes(int64_t num_tokens, int64_t num_seqs, int64_t Hq, int64_t Hkv,
                                            int64_t D, int64_t kv_tokens);

// Workspace bytes for a batch of at most num_tokens rows (split-K partials of decode rows; 0 when
// max_splits <= 1). Sizing with a larger num_tokens than the launch uses is fine.
size_t attention_workspace_bytes(int64_t num_tokens, int64_t Hq, int64_t D,
                                 int64_t max_splits = kAttentionMaxSplits);

// Enqueues: K/V norm+RoPE+cache store, then attention for decode rows (sequences with one row,
// or up to decode_max_rows: split-K over the context + a combine pass) and for prefill rows
// (longer sequences: causal flash attention over the cache). Grids depend on num_tokens / num_seqs /
// max_seq_tokens only, never on context lengths. Requirements (checked): Hq % Hkv == 0,
// D even in [2, 256], rotary_dim even and <= D, block_size >= 1. D a multiple of 32 runs on the
// tensor-core kernels; any other D on a simple fp32 CUDA-core fallback (one block per row and
// query head, decode and prefill alike; meant for small test models, not for speed).
void launch_gated_attention(const GatedAttentionParams& p, cudaStream_t stream);

}  // namespace qs::cuda

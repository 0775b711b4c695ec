// Gated DeltaNet (spec §2.4, §2.7) on the GPU. CPU reference: src/backend/cpu/cpu_gdn.cpp
// (CpuOps::gated_delta_net). Maths, per sequence, per value head h (key head kh = h / (Nv/Nk)):
//   conv:  c_t[ch] = silu(Σ_j conv_w[ch, j] · x_{t-(K-1)+j}[ch]), x_{<0} from the slot's conv window
//   q̂ = q / sqrt(Σq² + 1e-6) / sqrt(Dk),  k̂ = k / sqrt(Σk² + 1e-6)        (fp32)
//   β = sigmoid(b), g = -exp(A_log) · softplus(a + dt_bias) (threshold 20), decay = exp(g)
//   S ← decay·S;  δ = β·(v − Sᵀk̂);  S ← S + k̂ δᵀ;  o = Sᵀq̂               (S [Dk, Dv] fp32 math)
//   out = norm_w · o / sqrt(mean(o²) + eps) · silu(z)
// Two launches on the stream (grid mappings in gdn_conv.cu, gdn_serial.cu, gdn_chunked.cu):
//   1. conv1d + SiLU of all rows into the workspace ([T, conv_dim] fp32), advancing each sequence's
//      conv window (read and written by one thread per (sequence, 4 channels): race-free);
//   2. the recurrence fused with the gates, the l2norms and the gated RMSNorm. Sequences with fewer
//      than `chunk_min_tokens` tokens (all decode rows) run a token-serial kernel (state in
//      registers, read once and written once): one block per (sequence, value head) (gdn_serial.cu),
//      or (decode_kernel below; decode-only batches by default) persistent blocks that stream the
//      states through shared memory ahead of the compute (gdn_decode.cu); longer ones run the chunked kernel (chunk
//      64, WY/UT form on tensor cores, tf32x3 split = fp32-level accuracy), also one state read
//      and write, either one block per (sequence, value head) or, for few long sequences, the
//      chunk-parallel path (three launches: every chunk's WY precompute, the pass over chunks
//      split over value columns, the gated RMSNorm; see chunk_parallel below).
// Grids depend only on num_tokens / num_seqs / shapes; each block decides on the device which
// sequences it serves. The host also reads batch.max_seq_tokens to skip launches nobody needs (the
// chunked kernel when max < chunk_min_tokens, the conv row part when max <= K-1); the kernels are
// told what was skipped, so a stale max_seq_tokens in a replayed CUDA graph costs time, never
// correctness (0 = unknown: the conv row part runs, the chunked kernel does not).
// Requirements (checked in the launcher): Nv % Nk == 0, Dk and Dv multiples of 4 and <= 128,
// K in [2, 4], all pointers 16-byte aligned. Not checked: state slots of one call distinct.
// Fields added to the brief's interface: chunk_min_tokens, chunk_tf32x3, chunk_parallel,
// chunk_value_cols, decode_kernel, decode_blocks, decode_version, decode_stages, prefill_version.
#pragma once

#include <cstdint>

#include <cuda_runtime.h>

#include "backend/cuda/device_batch.h"

namespace qs::cuda {

struct GatedDeltaNetParams {
    const float* qkv = nullptr;      // [T, conv_dim] pre-conv projections (q | k | v), conv_dim = 2*Nk*Dk + Nv*Dv
    const float* z = nullptr;        // [T, Nv*Dv]
    const float* b = nullptr;        // [T, Nv]
    const float* a = nullptr;        // [T, Nv]
    const float* conv_w = nullptr;   // [conv_dim, K]; tap K-1 multiplies the current token
    const float* A_log = nullptr;    // [Nv]
    const float* dt_bias = nullptr;  // [Nv]
    const float* norm_w = nullptr;   // [Dv] plain scale
    float* conv_state = nullptr;     // [num_slots, K-1, conv_dim] fp32, token-major window, oldest first
    void* ssm_state = nullptr;       // [num_slots, Nv, Dk, Dv] fp32, or bf16 when ssm_bf16 (math always fp32)
    bool ssm_bf16 = false;
    int Nk = 0, Nv = 0, Dk = 0, Dv = 0, K = 0;
    float eps = 1e-6f;               // gated RMSNorm epsilon
    DeviceBatch batch;               // sequences laid back to back; seqs[s].state_slot, row_begin, num_tokens
    void* workspace = nullptr;       // gdn_workspace_bytes(T, conv_dim) bytes
    float* out = nullptr;            // [T, Nv*Dv]
    // Added: sequences with at least this many tokens in the call use the chunked kernel, the others
    // the token-serial one. <= 0 means "never chunked" (every sequence token-serial).
    // Needs batch.max_seq_tokens filled in (0 = unknown: no chunked launch, every sequence serial).
    int chunk_min_tokens = 64;
    // Added: chunked-kernel precision. true: 3xTF32 split products (fp32-level error, ~3x the tensor
    // work); false: plain TF32 operands (10-bit mantissa, ~1e-3 relative error).
    bool chunk_tf32x3 = true;
    // Added: the chunked sequences run the chunk-parallel path (gdn_cp_prep.cu: every chunk's WY
    // precompute at once; gdn_cp_state.cu: the pass over chunks per 32 or 64 value columns, then the
    // gated RMSNorm) instead of one block per (sequence, value head) (gdn_chunked.cu).
    // 1: always; 0: never; -1: by shape (gdn_kernels.cu: when the long sequences, estimated as
    // ceil(num_tokens / max_seq_tokens), times Nv leave most SMs idle in the one-block-per-head
    // kernel; measured on the H200: 1 × 16,384 5.6 ms against 12.8 ms, 16 × 1,024 4.3 ms against
    // 3.5 ms). The path needs batch.row_seq and the larger workspace of gdn_workspace_bytes, and
    // consumes the v part of the conv output (overwritten).
    int chunk_parallel = -1;
    // Added: value columns per block of the chunk-parallel state pass: 32 or 64 (64 only when
    // max(Dk, Dv) > 64); 0 = by shape (32 while the blocks fit in one wave over the SMs, else 64).
    int chunk_value_cols = 0;
    // Added: the kernel of the sequences below chunk_min_tokens. 0: one block per (sequence, value
    // head), state loaded into registers, computed, stored (gdn_serial.cu); 1: persistent blocks that
    // stream the states through a cp.async pipeline in shared memory, NS items ahead of the compute
    // (gdn_decode.cu); -1: by shape (kernel 1 for decode-only batches with bf16 state,
    // 1 <= batch.max_seq_tokens <= kGdnDecodeStreamMaxTokens: plain decode, MTP verification and
    // commit, while kGdnDecodeStreamByShape; else kernel 0: with fp32 state kernel 0 is faster). Both are correct for any such sequence, so a stale
    // max_seq_tokens in a replayed graph only picks the other kernel.
    // 2: the one-token sequences by a warp per 16 value columns of a (sequence, head), no barrier but
    // one per item for the norm (gdn_decode_slices.cu; bf16 state, Dk = Dv = 64 or 128), in batches
    // with max_seq_tokens 1 (plain decode), 0 (unknown) or >= chunk_min_tokens (mixed steps), the other
    // token-serial sequences by kernel 0 beside it; otherwise (MTP spans of 2 .. 8, other shapes,
    // fp32 state) as kernels 0 / 1 by shape. With max_seq_tokens 1 nothing else runs, so a batch must
    // not then hold a longer sequence (decode graphs are captured and replayed for one-token rows only).
    // -1 takes 2 where it applies while kGdnDecodeSlicesByShape.
    int decode_kernel = -1;
    // Added: blocks of the streaming kernel; 0 = min(num_seqs · Nv, 2 per SM). Other values are for
    // the lab and the emulation (e.g. 1 block that serves every item).
    int decode_blocks = 0;
    // Added: the streaming kernel's version (only where decode_kernel picks it). 1 (default): as
    // measured on the H200 (bench/kernels/NOTES.md "v4"); 2: no global load on an item's compute
    // path (A_log, dt_bias copied with the item's stage, norm_w in shared memory once per block) and,
    // at D = 128 bf16, three stages instead of two (one token-input buffer, the column sums in place):
    // bench/kernels/NOTES.md "GDN decode v2". Same arithmetic in the same order: bit-identical out
    // and state.
    int decode_version = 1;
    // Added: version 2's cp.async stages in use, 0 = as many as fit (3 at D = 128 bf16); fewer is for
    // the lab (gdn_lab --decode times version 2 with 2 stages too, to separate the stage count from
    // the rest of version 2).
    int decode_stages = 0;
    // Added: the warp-slice kernel's version (where decode_kernel picks it). 1: each lane copies its
    // own 16 rows x 32 bytes of an item's state into a lane-private ring; 2: the block's threads copy
    // whole rows into a ring shared by its warps (full 128-byte lines; H200 at 512 sequences 442 ->
    // 392 us a layer); 3 (default): 2 with the updated state written back into the ring and stored
    // by whole rows after the item's barrier (H200, 512 sequences: 385 -> 352 us, 80.7 % of copy;
    // bench/kernels/NOTES.md "GDN decode v5"). Same arithmetic: bit-identical out and state.
    int slices_version = 3;
    // Added: a second stream for the one-token and short sequences of a call that also has chunked
    // ones (a serving step's decodes beside prompt chunks). With side_stream set, the warp slices and
    // the serial kernel run on it, forked from the call's stream after the conv (side_fork) and joined
    // back before the launcher returns (side_join), concurrently with the chunk kernels: the kernels
    // touch disjoint rows, state slots and workspace regions, so the results are the same bits.
    // side_blocks: the warp slices' grid there (0 = decode_blocks' rule, 2 an SM: of 2, 1, 1/2 and
    // 1/4 an SM, on an H100 the one below one stream in every run of gdn_lab's serving shapes and the
    // lowest on average; 1/4 starved the slices). Null: one stream.
    cudaStream_t side_stream = nullptr;
    cudaEvent_t side_fork = nullptr;
    cudaEvent_t side_join = nullptr;
    int side_blocks = 0;
    // Added: the chunked sequences' prefill path. 1 (default): the 3xTF32 kernels above (one block per
    // head or chunk-parallel, chunk_parallel / chunk_tf32x3 / chunk_value_cols as documented there).
    // 2: bf16 tensor cores (bench/kernels/NOTES.md "v5"; gdn_tc_prep.cu every chunk's q̂, k̂, γ, W, U;
    // gdn_tc_state.cu the pass over chunks per (sequence, head, 16 or 32 value columns) storing the
    // chunk-start states; gdn_tc_out.cu every chunk's outputs with the gated RMSNorm): bf16 operands,
    // fp32 accumulation, fp32 state and triangular inverse; normalised error ~1e-3 against fp32.
    // chunk_value_cols picks its state pass's columns: 0 = by shape (16 while the blocks at 32
    // columns fit in one wave over the SMs, else 32), 16 or 32; chunk_parallel and chunk_tf32x3
    // do not apply. Needs Dk, Dv % 8 == 0 and the workspace of gdn_workspace_bytes(..., 2).
    // 3: version 2 with split operands (each bf16 operand as hi + lo bf16, three mma per product,
    // the lo arrays in the workspace of gdn_workspace_bytes(..., 3); NOTES.md "v5 accuracy").
    // 4: version 2 on fp16 operands. 5: version 4's results bit for bit, its prep and output
    // kernels' global loads issued ahead of their use (NOTES.md "GDN prep and output toward their
    // byte floors"; workspace as 4). 6: version 5 whose state pass takes 64 value columns per block
    // (8 warps) by shape, or with chunk_value_cols 64: version 5's results bit for bit, W and k̂
    // pulled from L2 half as often (NOTES.md "GDN state pass toward its byte floor").
    int prefill_version = 1;
};

// decode_kernel = -1 takes the streaming kernel for bf16 state while no sequence has more rows than
// this (and kGdnDecodeStreamByShape). H200, conv + recurrence at 512 / 256 / 64 / 1 sequences: bf16
// 456 / 235 / 70 / 17.4 µs against 548 / 278 / 74 / 16.2 for kernel 0; fp32 kernel 0 is faster
// (322 against 378 µs at 256). Flip kGdnDecodeStreamByShape to false to make gdn_serial.cu the default
// again (bench/kernels/NOTES.md, GDN v4, has the H200 comparison).
inline constexpr int kGdnDecodeStreamMaxTokens = 8;
inline constexpr bool kGdnDecodeStreamByShape = true;
// decode_kernel = -1 takes the warp-slice kernel (2) for the one-token rows of plain decode and mixed
// batches where its shape and state apply (bench/kernels/NOTES.md "GDN decode v5: warp slices").
inline constexpr bool kGdnDecodeSlicesByShape = true;

// The streaming decode kernel's plan for state tiles up to D x D (D = 32, 64, 128): resident blocks
// per SM on this device (cudaOccupancyMaxActiveBlocksPerMultiprocessor; the default grid assumes 2)
// and, through `stages`, its cp.async stages. For the lab's table (gdn_lab --decode).
int gdn_decode_stream_plan(int D, bool bf16, int version, int* stages);

// Bytes of scratch the launcher needs for T rows: the conv output [T, conv_dim] fp32, then the
// chunk-parallel path's per-row W [Nv, Dk], P [Nv, 64], γ [Nv] and norms [2, Nk] (fp32).
size_t gdn_workspace_bytes(int64_t num_tokens, int64_t conv_dim, int Nk, int Nv, int Dk);
// The same for a given prefill_version (1: as above; 2: the conv output, then bf16 q̂, k̂, W, U per
// row, γ, and the chunk-start states [num_seqs + ceil(T/64), Nv, Dk, Dv] bf16; 3: 2's, then the lo
// parts of q̂, k̂, W, U and the chunk-start states).
size_t gdn_workspace_bytes(int64_t num_tokens, int64_t conv_dim, int Nk, int Nv, int Dk, int Dv, int64_t num_seqs,
                           int prefill_version);

// Both launches below, in order. Never synchronises, never allocates.
void launch_gated_delta_net(const GatedDeltaNetParams& p, cudaStream_t stream);

// The two stages separately (for the lab's timing breakdown; launch_gated_delta_net = conv, then
// recurrence). The recurrence reads the conv output from p.workspace.
void launch_gdn_conv(const GatedDeltaNetParams& p, cudaStream_t stream);
void launch_gdn_recurrence(const GatedDeltaNetParams& p, cudaStream_t stream);

}  // namespace qs::cuda

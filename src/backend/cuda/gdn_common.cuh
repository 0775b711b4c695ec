// Shared pieces of the Gated DeltaNet kernels (gdn_*.cu; public API and maths in gdn_kernels.h):
// the requirement check macro, small device helpers, the recurrence kernels' argument block and
// state I/O, and the internal launchers that gdn_kernels.cu calls. Included by .cu files only;
// everything runs on the caller's stream (the engine thread's).
#pragma once

#include <cuda_bf16.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/gdn_chunk_map.h"
#include "backend/cuda/gdn_kernels.h"

#define GDN_REQUIRE(cond)                                                                          \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            std::fprintf(stderr, "%s:%d: gated_delta_net: requirement failed: %s\n", __FILE__,     \
                         __LINE__, #cond);                                                         \
            std::abort();                                                                          \
        }                                                                                          \
    } while (0)


namespace qs::cuda::gdn {

__device__ __forceinline__ float silu_f(float x) { return x / (1.0f + expf(-x)); }
__device__ __forceinline__ float sigmoid_f(float x) { return 1.0f / (1.0f + expf(-x)); }
__device__ __forceinline__ float softplus_f(float x) { return x > 20.0f ? x : log1pf(expf(x)); }

__device__ __forceinline__ float4 ld4(const float* p) { return *reinterpret_cast<const float4*>(p); }
__device__ __forceinline__ void st4(float* p, float4 v) { *reinterpret_cast<float4*>(p) = v; }

// Σq², Σk², q·k of one token's raw q, k (D floats each in shared memory, zero beyond Dk), summed by
// one warp (every warp of a block computes them redundantly: no barrier needed). The token-serial
// kernels' prologue (gdn_serial.cu, gdn_decode.cu).
struct QkNorms {
    float qq, kk, qk;
};
template <int D>
__device__ __forceinline__ QkNorms qk_norms_warp(const float* q, const float* k, int lane) {
    float qq = 0.f, kk = 0.f, qk = 0.f;
#pragma unroll
    for (int e = lane; e < D; e += 32) {
        const float qv = q[e], kv = k[e];
        qq = fmaf(qv, qv, qq);
        kk = fmaf(kv, kv, kk);
        qk = fmaf(qv, kv, qk);
    }
#pragma unroll
    for (int sh = 16; sh >= 1; sh >>= 1) {
        qq += __shfl_xor_sync(0xffffffffu, qq, sh);
        kk += __shfl_xor_sync(0xffffffffu, kk, sh);
        qk += __shfl_xor_sync(0xffffffffu, qk, sh);
    }
    return QkNorms{qq, kk, qk};
}

// Argument block of the recurrence kernels (gdn_serial.cu, gdn_decode.cu, gdn_chunked.cu, gdn_cp_*.cu).
struct RecArgs {
    const float* conv;  // [T, C] conv output (workspace)
    const float* z;
    const float* b;
    const float* a;
    const float* A_log;
    const float* dt_bias;
    const float* norm_w;
    void* state;
    float* out;
    const DeviceSeq* seqs;
    const GdnChunk* chunks;  // DeviceBatch::gdn_chunks when made for chunk_min_tokens (null: cp_chunk_of searches seqs)
    int num_chunks;          // with chunks: the chunk kernels' blocks (DeviceBatch::gdn_chunk_count)
    const int32_t* chunk_seqs;  // with chunks: DeviceBatch::gdn_chunk_seqs (null: a block per sequence)
    int num_chunk_seqs;         // with chunk_seqs: how many (DeviceBatch::gdn_chunk_seq_count)
    // gdn_serial.cu beside the chunk kernels and the warp slices only: DeviceBatch::gdn_short_seqs
    // (block y is sequence short_seqs[y]); null: block y is sequence y (serial_seq_of).
    const int32_t* short_seqs;
    int Nk, Nv, Dk, Dv, C;
    float eps, q_scale;
    int chunk_min_tokens;  // sequences with n >= this are skipped (chunked kernel); <= 0: none
    int skip_single;       // gdn_serial.cu / gdn_decode.cu: 1 = one-token sequences are gdn_decode_slices.cu's
    int stream_stages;     // gdn_decode.cu version 2: cp.async stages in use (0 = all; GatedDeltaNetParams::decode_stages)
    // Chunk-parallel path only (gdn_cp_*.cu; layout in CpLayout):
    float* conv_mut;       // = conv; the prep kernel overwrites each chunked row's v with U
    float* cpW;            // [T, Nv, Dk] W = T (k̂ β e^γ) per row
    float* cpP;            // [T, Nv, 64] P = lower(q̂ k̂ᵀ e^{γr-γs}) row r of its chunk
    float* cpGam;          // [T, Nv] γ = cumulative gate within the chunk, at the row
    float* cpRq;           // [T, Nk] q_scale / ||q||  (of the row, per key head)
    float* cpRk;           // [T, Nk] 1 / ||k||
    const int32_t* row_seq;
    int T, num_seqs;
    // Prefill version 2 only (gdn_tc_*.cu, bf16 tensor cores; layout in TcLayout), bf16 bits:
    uint16_t* tcQ;         // [T, Nk, Dk] q̂ (l2-normalised, × q_scale)
    uint16_t* tcK;         // [T, Nk, Dk] k̂
    uint16_t* tcW;         // [T, Nv, Dk] W = T (k̂ β e^γ)
    uint16_t* tcU;         // [T, Nv, Dv] U = T (v β); the state pass overwrites it with V' = U - W S
    float* tcGam;          // [T, Nv] γ (fp32)
    uint16_t* tcH;         // [num_seqs + ceil(T/64), Nv, Dv, Dk] the state at each chunk's start, transposed
    // Version 3 only (split operands): the lo parts (x − bf16(x), bf16) of the five arrays above,
    // same shapes; null in version 2.
    uint16_t *tcQl, *tcKl, *tcWl, *tcUl, *tcHl;
};

// The workspace (offsets in floats, every region 16-byte aligned): the conv output [T, C], then
// the chunk-parallel path's W, P, γ, 1/||q||, 1/||k|| (see RecArgs).
struct CpLayout {
    int64_t oW, oP, oGam, oRq, oRk, total;
};
inline CpLayout cp_layout(int64_t T, int64_t C, int64_t Nk, int64_t Nv, int64_t Dk) {
    auto r4 = [](int64_t x) { return (x + 3) / 4 * 4; };
    CpLayout L;
    L.oW = T * r4(C);
    L.oP = L.oW + T * Nv * r4(Dk);
    L.oGam = L.oP + T * Nv * 64;
    L.oRq = L.oGam + r4(T * Nv);
    L.oRk = L.oRq + r4(T * Nk);
    L.total = L.oRk + r4(T * Nk);
    return L;
}

// Prefill version 2's workspace (offsets in floats, 16-byte aligned): the conv output [T, C], then
// the bf16 arrays and γ of RecArgs::tc*. Chunk key x (cp_chunk_of) owns tcH's slice x.
// Version 3 (x2) adds the lo arrays after them (offsets -1 without).
struct TcLayout {
    int64_t oQ, oK, oW, oU, oGam, oH, oQl = -1, oKl = -1, oWl = -1, oUl = -1, oHl = -1, total;
};
inline TcLayout tc_layout(int64_t T, int64_t C, int64_t Nk, int64_t Nv, int64_t Dk, int64_t Dv, int64_t num_seqs,
                          bool x2 = false) {
    auto r4 = [](int64_t x) { return (x + 3) / 4 * 4; };
    auto bf = [&](int64_t n) { return r4((n + 1) / 2); };  // n bf16 values, in floats
    const int64_t nH = (num_seqs + (T + 63) / 64) * Nv * Dk * Dv;
    TcLayout L;
    L.oQ = T * r4(C);
    L.oK = L.oQ + bf(T * Nk * Dk);
    L.oW = L.oK + bf(T * Nk * Dk);
    L.oU = L.oW + bf(T * Nv * Dk);
    L.oGam = L.oU + bf(T * Nv * Dv);
    L.oH = L.oGam + r4(T * Nv);
    L.total = L.oH + bf(nH);
    if (x2) {
        L.oQl = L.total;
        L.oKl = L.oQl + bf(T * Nk * Dk);
        L.oWl = L.oKl + bf(T * Nk * Dk);
        L.oUl = L.oWl + bf(T * Nv * Dk);
        L.oHl = L.oUl + bf(T * Nv * Dv);
        L.total = L.oHl + bf(nH);
    }
    return L;
}

// Chunk-parallel grids (gdn_cp_prep.cu, gdn_tc_prep.cu, gdn_tc_out.cu; gdn_chunk_map.h): with the
// map, block x is chunk p.chunks[x] (one 16-byte load); without it the grid has a block per key,
// num_seqs + ceil(T/64), and block x searches seqs for the sequence whose chunk has key x (blocks of
// no chunk: gaps, sequences below chunk_min_tokens, return false). chunk_grid_blocks: grid.x.
__device__ __forceinline__ bool cp_chunk_of(const RecArgs& p, int x, GdnChunk& k) {
    if (p.chunk_min_tokens <= 0 || p.num_seqs <= 0) return false;
    if (p.chunks != nullptr) {
        const uint4 e = __ldg(reinterpret_cast<const uint4*>(p.chunks) + x);
        k = GdnChunk{int32_t(e.x), int32_t(e.y), int32_t(e.z), int32_t(e.w)};
    } else {
        k = gdn_chunk_by_search(p.seqs, p.num_seqs, x);
    }
    return k.num_tokens >= p.chunk_min_tokens && k.chunk >= 0 && 64 * k.chunk < k.num_tokens;
}

inline unsigned chunk_grid_blocks(const RecArgs& a) {
    return unsigned(a.chunks != nullptr ? a.num_chunks : a.num_seqs + (a.T + 63) / 64);
}

// Grids with a block per chunked sequence (gdn_tc_state.cu, gdn_cp_state.cu, gdn_chunked.cu): with
// the list, block z is sequence p.chunk_seqs[z]; without it, sequence z (the kernels return at once
// for a sequence below chunk_min_tokens). chunked_seq_blocks: that grid dimension (0: no launch).
__device__ __forceinline__ int chunked_seq_of(const RecArgs& p, int z) {
    return p.chunk_seqs != nullptr ? __ldg(p.chunk_seqs + z) : z;
}

inline unsigned chunked_seq_blocks(const RecArgs& a) {
    return unsigned(a.chunk_seqs != nullptr ? a.num_chunk_seqs : a.num_seqs);
}

// The token-serial kernel's sequence of grid row y (gdn_serial.cu; RecArgs::short_seqs).
__device__ __forceinline__ int serial_seq_of(const RecArgs& p, int y) {
    return p.short_seqs != nullptr ? __ldg(p.short_seqs + y) : y;
}

template <bool BF16>
struct StateIO;

template <>
struct StateIO<false> {
    static __device__ __forceinline__ float4 load(const void* base, int64_t idx) {
        return __ldcs(reinterpret_cast<const float4*>(static_cast<const float*>(base) + idx));
    }
    static __device__ __forceinline__ void store(void* base, int64_t idx, float4 v) {
        __stcs(reinterpret_cast<float4*>(static_cast<float*>(base) + idx), v);
    }
};

template <>
struct StateIO<true> {
    static __device__ __forceinline__ float4 load(const void* base, int64_t idx) {
        const uint2 u = __ldcs(reinterpret_cast<const uint2*>(static_cast<const __nv_bfloat16*>(base) + idx));
        const float2 lo = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&u.x));
        const float2 hi = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&u.y));
        return make_float4(lo.x, lo.y, hi.x, hi.y);
    }
    static __device__ __forceinline__ void store(void* base, int64_t idx, float4 v) {
        const __nv_bfloat162 lo = __floats2bfloat162_rn(v.x, v.y);
        const __nv_bfloat162 hi = __floats2bfloat162_rn(v.z, v.w);
        uint2 u;
        u.x = *reinterpret_cast<const uint32_t*>(&lo);
        u.y = *reinterpret_cast<const uint32_t*>(&hi);
        __stcs(reinterpret_cast<uint2*>(static_cast<__nv_bfloat16*>(base) + idx), u);
    }
};

// Aborts with the failed requirement unless p is a shape and layout the kernels support.
void check_params(const GatedDeltaNetParams& p);

// Recurrence launchers for state tiles up to D x D (D = 32, 64, 128): gdn_serial.cu,
// gdn_decode.cu and gdn_chunked.cu. The serial kernel skips sequences with n >= a.chunk_min_tokens (> 0).
template <int D>
void launch_serial(const RecArgs& a, bool bf16, int num_seqs, cudaStream_t stream);
template <int D>
void launch_chunked(const RecArgs& a, bool bf16, bool x3, int num_seqs, cudaStream_t stream);
// The same sequences as launch_serial, by `blocks` persistent blocks that stream the (sequence,
// value head) states through a cp.async pipeline in shared memory (gdn_decode.cu); version 1 or 2
// (GatedDeltaNetParams::decode_version).
template <int D>
void launch_stream(const RecArgs& a, bool bf16, int version, int blocks, cudaStream_t stream);
// The one-token sequences with bf16 state, a warp per 16 value columns of a (sequence, value head)
// (gdn_decode_slices.cu; decode_kernel 2), for Dk = Dv = D = 64 or 128 (slices_supported). version:
// 1 = lane-private state ring, 2 = a ring shared by the block's warps, filled by whole rows, 3 = 2
// with the stores by whole rows too (same bits). blocks: persistent blocks, 0 = as many as fit on
// `sms` SMs.
bool slices_supported(int Dk, int Dv, bool bf16);
template <int D>
void launch_slices(const RecArgs& a, int version, int blocks, int sms, cudaStream_t stream);
// The chunk-parallel path for the same sequences as launch_chunked (gdn_cp_prep.cu: per-chunk WY
// precompute; gdn_cp_state.cu: the pass over chunks per (sequence, head, value_cols = 32 or 64
// value columns; 64 only at D = 128) with the outputs, then their gated RMSNorm). Needs the
// CpLayout workspace.
template <int D>
void launch_cp_prep(const RecArgs& a, bool x3, cudaStream_t stream);
template <int D>
void launch_cp_state(const RecArgs& a, bool bf16, bool x3, int value_cols, cudaStream_t stream);
// Prefill versions 2-4 (16-bit tensor cores; NOTES.md "v5"), the same sequences as launch_chunked:
// gdn_tc_prep.cu (every chunk's q̂, k̂, γ, W, U), gdn_tc_state.cu (the pass over chunks per
// (sequence, head, value_cols = 16 or 32 columns): V' and the chunk-start states), gdn_tc_out.cu
// (every chunk's outputs with the gated RMSNorm). Needs the TcLayout workspace; Dk, Dv % 8 == 0.
// ops: the operand format. kBf16x2 (version 3): every bf16 operand split into hi + lo
// (RecArgs::tc*l), three products per mma; kF16 (version 4): fp16 operands in version 2's layout;
// kF16Early (version 5): version 4's operands, arithmetic and results (bit for bit), with the prep's
// row loads and the output kernel's gate loads issued ahead of their use (NOTES.md "GDN prep and
// output toward their byte floors"); the state pass is version 4's. Version 6 is version 5 with the
// state pass at 64 value columns by shape (launch_chunked_any; value_cols 64 takes fp16 operands only).
enum class TcOperands { kBf16, kBf16x2, kF16, kF16Early };
inline TcOperands tc_operands(int prefill_version) {
    return prefill_version == 3   ? TcOperands::kBf16x2
           : prefill_version == 4 ? TcOperands::kF16
           : prefill_version >= 5 ? TcOperands::kF16Early
                                  : TcOperands::kBf16;
}
template <int D>
void launch_tc_prep(const RecArgs& a, TcOperands ops, cudaStream_t stream);
template <int D>
void launch_tc_state(const RecArgs& a, bool bf16, TcOperands ops, int value_cols, cudaStream_t stream);
template <int D>
void launch_tc_out(const RecArgs& a, TcOperands ops, cudaStream_t stream);

}  // namespace qs::cuda::gdn

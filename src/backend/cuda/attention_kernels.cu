// Gated full attention kernels (spec §2.3; CPU reference: CpuOps::gated_attention in
// src/backend/cpu/cpu_attention.cpp). Maths and precision: see attention_kernels.h.
//
// Layouts (all row-major): qg [T, Hq, 2D] fp32 (query D, gate D per head); k, v [T, Hkv, D] fp32;
// caches [num_blocks, block_size, Hkv, D] bf16 or fp8 e4m3; out [T, Hq*D] fp32.
// Workspace: part_o [slots, Hq, D] fp32 (unnormalised split-K outputs), part_ml [slots, Hq]
// float2 (running max in log2 units, softmax denominator); slot = seq * splits + split.
//
// Kernels, in launch order on one stream:
//  1. kv_store_kernel: one warp per (row, kv head): k-norm + RoPE, stores k and v rounded to the
//     cache dtype at (page, offset) of the row's position. Grid ceil(T*Hkv / 4) x 128 threads.
//  2. attention_kernel<kDecode=true>: sequences with exactly one row. Block = 1 warp =
//     (split, seq, kv head [, head chunk]); the warp's 16 mma rows are the G query heads of
//     the kv head (G <= 16 per chunk; rows beyond G are zero). The split's key range is
//     computed on the device from the position, so the grid (splits, num_seqs, Hkv*chunks) is
//     context-independent. splits > 1 writes partials, combine_kernel (3.) finishes.
//  4. attention_kernel<kDecode=false>: sequences with >= 2 rows (prefill chunks, MTP verify).
//     Block = W warps = 16W mma rows = BQ query rows x min(G, 16W) heads packed (row-major in
//     (query row, head)), all sharing one kv head: each K/V tile is read once for the group.
//     W = 4, or 8 for D = 256 when max_seq_tokens >= 64 (K/V tile reuse: L2 traffic per FLOP).
//     Grid (num_seqs*Hkv*chunks, ceil(max_seq_tokens/BQ)); the heaviest (last) query tiles of
//     every sequence are scheduled first. Causal mask: key <= position of the mma row.
// Both attention variants: q-norm + RoPE of the tile's queries in the prologue (fp32, rounded to
// 16-bit into shared memory), then a cp.async multi-stage pipeline of K/V tiles gathered from the
// page table (keys past the range are zero-filled), S = Q Kᵀ and O += P V with
// mma.sync.m16n8k16 (fp32 accumulate), FA2-style online softmax in fp32 (exp2 domain), and the
// epilogue O / l ⊙ sigmoid(gate). fp8 tiles land raw in shared memory and are converted to f16
// (exact) before the products. D < 256 that is not 64 or 128 runs on the next larger instance
// with zero padding of the head dimension.
#include "backend/cuda/attention_kernels.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/ptx_helpers.cuh"
#include "core/check.h"

// Tuning knobs (compile-time; the lab may override them with -D to compare variants).
#ifndef QS_ATTN_DEC_BK
#define QS_ATTN_DEC_BK 16
#endif
#ifndef QS_ATTN_DEC_STAGES
#define QS_ATTN_DEC_STAGES 3
#endif
#ifndef QS_ATTN_PRE_WARPS
#define QS_ATTN_PRE_WARPS 4
#endif
#ifndef QS_ATTN_PRE_LONG_WARPS  // D = 256 prefill with max_seq_tokens >= QS_ATTN_PRE_LONG_ROWS
#define QS_ATTN_PRE_LONG_WARPS 8
#endif
#ifndef QS_ATTN_PRE_LONG_ROWS
#define QS_ATTN_PRE_LONG_ROWS 64
#endif
#ifndef QS_ATTN_PRE_BK
#define QS_ATTN_PRE_BK 32
#endif
#ifndef QS_ATTN_PRE_STAGES
#define QS_ATTN_PRE_STAGES 2
#endif

namespace qs::cuda {
namespace {

using ptx::cp_async16;
using ptx::cp_async_commit;
using ptx::cp_async_wait;
using ptx::ldsm_x4;
using ptx::ldsm_x4_t;
using ptx::smem_u32;

constexpr int kMaxRotaryHalf = 128;   // rotary_dim <= D <= 256
constexpr int kMaxSplitsHard = 64;    // combine kernel's shared array
constexpr int64_t kMaxPartialSlots = 2048;  // (seq, split) pairs the workspace holds at most
constexpr int kStoreWarps = 4;
constexpr float kNegInf = -INFINITY;

// Everything the kernels read, passed by value as a __grid_constant__ parameter.
struct Args {
    const float* qg;
    const float* k;
    const float* v;
    const float* q_norm_w;
    const float* k_norm_w;
    void* k_cache;
    void* v_cache;
    DeviceBatch batch;
    float* out;
    float* part_o;    // [slots, Hq, D]
    float2* part_ml;  // [slots, Hq]
    int Hq, Hkv, D, G, rotary_dim, block_size, bs_shift;  // bs_shift = log2(block_size) or -1
    int splits;
    float eps, scale_log2;  // scale_log2 = log2(e) / sqrt(D)
    float inv_freq[kMaxRotaryHalf];
};

int64_t partial_slots(int64_t num_tokens, int64_t max_splits) {
    if (max_splits <= 1) return 0;
    return std::min<int64_t>(num_tokens * max_splits, kMaxPartialSlots);
}
size_t align256(size_t n) { return (n + 255) & ~size_t(255); }

// ---------------------------------------------------------------------------------------------
// Device helpers

__device__ __forceinline__ float warp_sum(float x) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
    return x;
}

// 16-bit operand type of the products: bf16 for a bf16 cache, f16 for an fp8 cache.
template <typename T>
struct Op16;
template <>
struct Op16<__nv_bfloat16> {
    static __device__ __forceinline__ uint32_t pack(float lo, float hi) {
        __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
        uint32_t u;
        memcpy(&u, &h, 4);
        return u;
    }
    static __device__ __forceinline__ float2 unpack(uint32_t u) {
        __nv_bfloat162 h;
        memcpy(&h, &u, 4);
        return __bfloat1622float2(h);
    }
    static __device__ __forceinline__ __nv_bfloat16 from_float(float x) { return __float2bfloat16_rn(x); }
    static __device__ __forceinline__ void mma(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
        ptx::mma_16816_bf16(c, a, b0, b1);
    }
};
template <>
struct Op16<__half> {
    static __device__ __forceinline__ uint32_t pack(float lo, float hi) {
        __half2 h = __floats2half2_rn(lo, hi);
        uint32_t u;
        memcpy(&u, &h, 4);
        return u;
    }
    static __device__ __forceinline__ float2 unpack(uint32_t u) {
        __half2 h;
        memcpy(&h, &u, 4);
        return __half22float2(h);
    }
    static __device__ __forceinline__ __half from_float(float x) { return __float2half_rn(x); }
    static __device__ __forceinline__ void mma(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
        ptx::mma_16816_f16(c, a, b0, b1);
    }
};

template <typename CT>
__device__ __forceinline__ CT to_cache(float x);
template <>
__device__ __forceinline__ __nv_bfloat16 to_cache<__nv_bfloat16>(float x) {
    return __float2bfloat16_rn(x);  // round to nearest even, as core/dtype.h f32_to_bf16
}
template <>
__device__ __forceinline__ __nv_fp8_e4m3 to_cache<__nv_fp8_e4m3>(float x) {
    return __nv_fp8_e4m3(x);  // cvt.rn.satfinite.e4m3x2.f32, as core/dtype.cpp f32_to_fp8e4m3
}

// One warp: x[0, D) fp32 -> zero-centred RMSNorm (weight w) -> NeoX RoPE on the first `rot`
// dims at `pos`, in the CPU's operation order (products and sums rounded one by one; only the
// sum of squares is ordered differently). Lane holds element j = lane + 32c in vals[c]
// (0 for j >= D). scratch: this warp's >= D floats of shared memory.
template <int C>
__device__ __forceinline__ void norm_rope_warp(const float* __restrict__ x, const float* __restrict__ w, int D,
                                               int rot, int pos, float eps, const float* inv_freq,
                                               float* scratch, float (&vals)[C]) {
    const int lane = threadIdx.x & 31;
    float ss = 0.0f;
#pragma unroll
    for (int c = 0; c < C; ++c) {
        const int j = lane + 32 * c;
        vals[c] = j < D ? x[j] : 0.0f;
        ss = fmaf(vals[c], vals[c], ss);
    }
    ss = warp_sum(ss);
    // Explicitly rounded operations: the stored k must round like the CPU's, --use_fast_math or not.
    const float inv = __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(__fdiv_rn(ss, float(D)), eps)));
#pragma unroll
    for (int c = 0; c < C; ++c) {
        const int j = lane + 32 * c;
        if (j < D) {
            vals[c] = __fmul_rn(__fmul_rn(vals[c], inv), __fadd_rn(1.0f, w[j]));
            scratch[j] = vals[c];
        }
    }
    __syncwarp();
    const int half = rot >> 1;
#pragma unroll
    for (int c = 0; c < C; ++c) {
        const int j = lane + 32 * c;
        if (j < rot) {
            const bool lo = j < half;
            const int i = lo ? j : j - half;
            // Angles reach ~1e4 rad: sin/cos in double, rounded once, track the CPU's cosf/sinf
            // (correctly rounded in glibc) better than sincosf's 2 ulp, and fast-math cannot touch it.
            double sd, cd;
            sincos(double(__fmul_rn(float(pos), inv_freq[i])), &sd, &cd);
            const float sn = float(sd), cs = float(cd);
            const float other = scratch[lo ? j + half : j - half];
            vals[c] = lo ? __fsub_rn(__fmul_rn(vals[c], cs), __fmul_rn(other, sn))
                         : __fadd_rn(__fmul_rn(vals[c], cs), __fmul_rn(other, sn));
        }
    }
    __syncwarp();  // scratch is reused by this warp's next call
}

__device__ __forceinline__ float sigmoidf_(float x) { return 1.0f / (1.0f + expf(-x)); }

// ---------------------------------------------------------------------------------------------
// 1. K/V: norm + RoPE + store into the paged cache.

template <typename CT>
__global__ void __launch_bounds__(kStoreWarps * 32) kv_store_kernel(const __grid_constant__ Args a) {
    __shared__ float scratch[kStoreWarps][256];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int item = blockIdx.x * kStoreWarps + warp;
    if (item >= a.batch.num_tokens * a.Hkv) return;  // warp-uniform; no block barrier below
    const int row = item / a.Hkv, h = item - row * a.Hkv;
    const int pos = a.batch.positions[row];
    const DeviceSeq s = a.batch.seqs[a.batch.row_seq[row]];
    const int page = a.batch.block_tables[s.block_table_begin + pos / a.block_size];
    const int64_t slot = int64_t(page) * a.block_size + pos % a.block_size;
    const int64_t src = (int64_t(row) * a.Hkv + h) * a.D;
    float vals[8];
    norm_rope_warp<8>(a.k + src, a.k_norm_w, a.D, a.rotary_dim, pos, a.eps, a.inv_freq, scratch[warp], vals);
    CT* kd = static_cast<CT*>(a.k_cache) + (slot * a.Hkv + h) * a.D;
    CT* vd = static_cast<CT*>(a.v_cache) + (slot * a.Hkv + h) * a.D;
    const float* vs = a.v + src;
#pragma unroll
    for (int c = 0; c < 8; ++c) {
        const int j = lane + 32 * c;
        if (j < a.D) {
            kd[j] = to_cache<CT>(vals[c]);
            vd[j] = to_cache<CT>(vs[j]);
        }
    }
}

// ---------------------------------------------------------------------------------------------
// 2./4. Attention.

template <typename CT, int DP, int WARPS, int BK, int STAGES>
struct AttnCfg {
    static constexpr bool kRaw = !std::is_same_v<CT, __nv_bfloat16>;  // fp8: raw ring + convert
    using T16 = std::conditional_t<kRaw, __half, __nv_bfloat16>;
    static constexpr int kThreads = WARPS * 32;
    static constexpr int kM = 16 * WARPS;
    static constexpr int kLd = DP + 8;  // 16-bit tile row stride (elements): conflict-free ldmatrix
    static constexpr int kEsize = int(sizeof(CT));
    static constexpr int kRingRowBytes = kRaw ? DP : kLd * 2;
    static constexpr size_t kRingTileBytes = size_t(BK) * kRingRowBytes;  // one K or V tile
    static constexpr size_t kQBytes = size_t(kM) * kLd * 2;
    static constexpr size_t kRingBytes = size_t(STAGES) * 2 * kRingTileBytes;
    static constexpr size_t kOpBytes = kRaw ? size_t(2) * BK * kLd * 2 : 0;
    static constexpr size_t kScratchBytes = size_t(WARPS) * DP * 4;
    static constexpr size_t kSmemBytes = kQBytes + kRingBytes + kOpBytes + kScratchBytes;
    static_assert(DP % 64 == 0 && DP <= 256 && BK % 16 == 0 && STAGES >= 2);
    static_assert(kQBytes % 16 == 0 && kRingTileBytes % 16 == 0 && kOpBytes % 16 == 0);
};

template <typename CT, int DP, int WARPS, int BK, int STAGES, bool kDecode>
__global__ void __launch_bounds__(WARPS * 32) attention_kernel(const __grid_constant__ Args a) {
    using Cfg = AttnCfg<CT, DP, WARPS, BK, STAGES>;
    using T16 = typename Cfg::T16;
    using Op = Op16<T16>;
    constexpr int M = Cfg::kM, LD = Cfg::kLd, NT = Cfg::kThreads, ES = Cfg::kEsize;
    constexpr int CPR = DP * ES / 16;  // 16-byte chunks per (padded) cache row: 4..32
    constexpr int KSTEP = NT / CPR;    // keys covered by one pass of the block over a tile
    constexpr int KS = BK / 8 >= 4 ? 1 : 2;  // independent S accumulator sets (mma ILP)

    uint8_t* smem = ptx::dynamic_smem();
    T16* sQ = reinterpret_cast<T16*>(smem);
    uint8_t* ring = smem + Cfg::kQBytes;
    T16* opK = reinterpret_cast<T16*>(ring + Cfg::kRingBytes);  // fp8 only
    T16* opV = opK + BK * LD;
    float* scratch = reinterpret_cast<float*>(ring + Cfg::kRingBytes + Cfg::kOpBytes);

    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const int G = a.G, HG = min(G, M), BQ = M / HG, nhc = (G + HG - 1) / HG;

    int seq_idx, tile, zi, split;
    if constexpr (kDecode) {
        split = blockIdx.x;
        seq_idx = blockIdx.y;
        zi = blockIdx.z;
        tile = 0;
    } else {
        const int per_seq = a.Hkv * nhc;
        seq_idx = blockIdx.x / per_seq;
        zi = blockIdx.x - seq_idx * per_seq;
        tile = gridDim.y - 1 - blockIdx.y;  // heaviest (latest) query tiles first
        split = 0;
    }
    const DeviceSeq s = a.batch.seqs[seq_idx];
    if constexpr (kDecode) {
        if (s.num_tokens != 1) return;
    } else {
        if (s.num_tokens <= 1 || tile * BQ >= s.num_tokens) return;
    }
    const int kvh = zi / nhc, hc = zi - kvh * nhc;
    const int head0 = kvh * G + hc * HG;
    const int heads_here = min(HG, G - hc * HG);
    const int row0 = s.row_begin + tile * BQ;
    const int rows_here = min(BQ, s.num_tokens - tile * BQ);
    const int* positions = a.batch.positions;

    // Key range [kbeg, kend) of this block.
    int kbeg = 0, kend = 0;
    if constexpr (kDecode) {
        const int ctx = positions[row0] + 1;
        const int per = (ctx + a.splits - 1) / a.splits;
        const int chunk = (per + BK - 1) / BK * BK;
        kbeg = min(split * chunk, ctx);
        kend = min(ctx, kbeg + chunk);
    } else {
        for (int r = 0; r < rows_here; ++r) kend = max(kend, positions[row0 + r] + 1);
    }
    const int ntiles = kend > kbeg ? (kend - kbeg + BK - 1) / BK : 0;

    // K/V tile loader: cp.async 16-byte chunks gathered through the page table; keys >= kend
    // are zero-filled (their values are never finite-checked otherwise).
    const uint8_t* kc = static_cast<const uint8_t*>(a.k_cache);
    const uint8_t* vc = static_cast<const uint8_t*>(a.v_cache);
    const int64_t slot_bytes = int64_t(a.Hkv) * a.D * ES;
    const int64_t head_off = int64_t(kvh) * a.D * ES;
    const int row_chunks = a.D * ES / 16;
    const int ch = tid % CPR;
    const int* bt = a.batch.block_tables + s.block_table_begin;
    auto load_tile = [&](int j, int stage) {
        if (ch >= row_chunks) return;
        const int k0 = kbeg + j * BK;
        uint8_t* dK = ring + size_t(stage) * 2 * Cfg::kRingTileBytes;
        uint8_t* dV = dK + Cfg::kRingTileBytes;
#pragma unroll
        for (int it = 0; it < (BK + KSTEP - 1) / KSTEP; ++it) {  // compile-time trip: loads batch up
            const int kl = tid / CPR + it * KSTEP;
            if (kl >= BK) break;
            const int key = k0 + kl;
            const bool ok = key < kend;
            int64_t off = 0;
            if (ok) {
                const int pi = a.bs_shift >= 0 ? (key >> a.bs_shift) : key / a.block_size;
                const int po = key - pi * a.block_size;
                const int page = __ldg(bt + pi);
                off = (int64_t(page) * a.block_size + po) * slot_bytes + head_off + ch * 16;
            }
            const int d = kl * Cfg::kRingRowBytes + ch * 16;
            cp_async16(smem_u32(dK + d), kc + off, ok ? 16 : 0);
            cp_async16(smem_u32(dV + d), vc + off, ok ? 16 : 0);
        }
    };

    // Issue the first tiles before the query prologue so their latency overlaps it.
#pragma unroll
    for (int st = 0; st < STAGES - 1; ++st) {
        if (st < ntiles) load_tile(st, st);
        cp_async_commit();
    }

    // Head-dim padding (D < DP): columns [D, DP) of the ring are never written by cp.async.
    if (a.D < DP) {
        const int from = a.D * ES, chunks = (DP * ES - from) / 16, rows = STAGES * 2 * BK;
        for (int i = tid; i < rows * chunks; i += NT) {
            const int r = i / chunks, c = i - r * chunks;
            *reinterpret_cast<uint4*>(ring + size_t(r) * Cfg::kRingRowBytes + from + c * 16) = make_uint4(0, 0, 0, 0);
        }
    }

    // Query prologue: q-norm + RoPE of the M packed (query row, head) rows -> sQ (16-bit).
    for (int m = warp; m < M; m += WARPS) {
        const int r = m / HG, hl = m - r * HG;
        T16* dst = sQ + m * LD;
        if (r < rows_here && hl < heads_here) {  // warp-uniform
            const int row = row0 + r, head = head0 + hl;
            float vals[DP / 32];
            norm_rope_warp<DP / 32>(a.qg + (int64_t(row) * a.Hq + head) * 2 * a.D, a.q_norm_w, a.D, a.rotary_dim,
                                    positions[row], a.eps, a.inv_freq, scratch + warp * DP, vals);
#pragma unroll
            for (int c = 0; c < DP / 32; ++c) dst[lane + 32 * c] = Op::from_float(vals[c]);
        } else {
#pragma unroll
            for (int c = 0; c < DP / 32; ++c) dst[lane + 32 * c] = Op::from_float(0.0f);
        }
    }

    const int g = lane >> 2, t = lane & 3;
    // Key limit of this thread's two mma rows (g, g + 8): causal bound and block range.
    int klim[2];
#pragma unroll
    for (int i = 0; i < 2; ++i) {
        const int m = warp * 16 + g + 8 * i;
        const int r = m / HG, hl = m - r * HG;
        klim[i] = (r < rows_here && hl < heads_here) ? min(kend, positions[row0 + r] + 1) : kend;
    }

    float o[DP / 8][4];
#pragma unroll
    for (int n = 0; n < DP / 8; ++n) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.0f;
    float m_run[2] = {kNegInf, kNegInf}, l_run[2] = {0.0f, 0.0f};

    const uint32_t q_addr = smem_u32(sQ + (warp * 16 + (lane & 15)) * LD + (lane >> 4) * 8);
    const int k_lane_off = ((lane & 7) + ((lane >> 4) << 3)) * LD + ((lane >> 3) & 1) * 8;
    const int v_lane_off = ((lane & 7) + (((lane >> 3) & 1) << 3)) * LD + (lane >> 4) * 8;

    __syncthreads();  // sQ and padding visible

    for (int j = 0; j < ntiles; ++j) {
        const int jn = j + STAGES - 1;
        if (jn < ntiles) load_tile(jn, jn % STAGES);
        cp_async_commit();
        cp_async_wait<STAGES - 1>();
        __syncthreads();  // tile j visible to all threads
        const int stage = j % STAGES;
        const T16* tK;
        const T16* tV;
        if constexpr (Cfg::kRaw) {
            // fp8 -> f16 (exact) into the operand tiles.
            const uint8_t* rK = ring + size_t(stage) * 2 * Cfg::kRingTileBytes;
            constexpr int CH = DP / 16;
            for (int i = tid; i < 2 * BK * CH; i += NT) {
                const int tsel = i / (BK * CH), rem = i - tsel * (BK * CH);
                const int kl = rem / CH, c = rem - kl * CH;
                const uint4 raw = *reinterpret_cast<const uint4*>(rK + tsel * Cfg::kRingTileBytes + kl * DP + c * 16);
                const uint32_t wds[4] = {raw.x, raw.y, raw.z, raw.w};
                uint32_t h[8];
#pragma unroll
                for (int q = 0; q < 4; ++q) {
                    const __half2_raw lo = __nv_cvt_fp8x2_to_halfraw2(__nv_fp8x2_storage_t(wds[q] & 0xffffu), __NV_E4M3);
                    const __half2_raw hi = __nv_cvt_fp8x2_to_halfraw2(__nv_fp8x2_storage_t(wds[q] >> 16), __NV_E4M3);
                    h[2 * q] = uint32_t(lo.x) | (uint32_t(lo.y) << 16);
                    h[2 * q + 1] = uint32_t(hi.x) | (uint32_t(hi.y) << 16);
                }
                T16* dst = (tsel == 0 ? opK : opV) + kl * LD + c * 16;
                *reinterpret_cast<uint4*>(dst) = make_uint4(h[0], h[1], h[2], h[3]);
                *reinterpret_cast<uint4*>(dst + 8) = make_uint4(h[4], h[5], h[6], h[7]);
            }
            __syncthreads();
            tK = opK;
            tV = opV;
        } else {
            tK = reinterpret_cast<const T16*>(ring + size_t(stage) * 2 * Cfg::kRingTileBytes);
            tV = tK + BK * LD;
        }

        // S = Q Kᵀ  (16 rows of this warp x BK keys)
        float sacc[KS][BK / 8][4];
#pragma unroll
        for (int u = 0; u < KS; ++u)
#pragma unroll
            for (int n = 0; n < BK / 8; ++n) sacc[u][n][0] = sacc[u][n][1] = sacc[u][n][2] = sacc[u][n][3] = 0.0f;
        const uint32_t k_addr = smem_u32(tK + k_lane_off);
#pragma unroll
        for (int kk = 0; kk < DP / 16; ++kk) {
            uint32_t af[4];
            ldsm_x4(q_addr + kk * 32, af);
#pragma unroll
            for (int np = 0; np < BK / 16; ++np) {
                uint32_t bf[4];
                ldsm_x4(k_addr + (np * 16 * LD + kk * 16) * 2, bf);
                Op::mma(sacc[kk % KS][2 * np], af, bf[0], bf[1]);
                Op::mma(sacc[kk % KS][2 * np + 1], af, bf[2], bf[3]);
            }
        }
        float sc[BK / 8][4];
#pragma unroll
        for (int n = 0; n < BK / 8; ++n)
#pragma unroll
            for (int e = 0; e < 4; ++e) sc[n][e] = KS == 2 ? sacc[0][n][e] + sacc[KS - 1][n][e] : sacc[0][n][e];

        // Online softmax (log2 domain) on rows g (i = 0) and g + 8 (i = 1).
        const int k0 = kbeg + j * BK;
#pragma unroll
        for (int i = 0; i < 2; ++i) {
            float mx = kNegInf;
#pragma unroll
            for (int n = 0; n < BK / 8; ++n)
#pragma unroll
                for (int e = 0; e < 2; ++e) {
                    const int key = k0 + n * 8 + 2 * t + e;
                    const float x = key < klim[i] ? sc[n][2 * i + e] * a.scale_log2 : kNegInf;
                    sc[n][2 * i + e] = x;
                    mx = fmaxf(mx, x);
                }
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
            const float m_new = fmaxf(m_run[i], mx);
            const float base = m_new == kNegInf ? 0.0f : m_new;
            const float alpha = exp2f(m_run[i] - base);
            m_run[i] = m_new;
            l_run[i] *= alpha;
#pragma unroll
            for (int n = 0; n < DP / 8; ++n) {
                o[n][2 * i] *= alpha;
                o[n][2 * i + 1] *= alpha;
            }
#pragma unroll
            for (int n = 0; n < BK / 8; ++n) {
                sc[n][2 * i] = exp2f(sc[n][2 * i] - base);
                sc[n][2 * i + 1] = exp2f(sc[n][2 * i + 1] - base);
            }
        }
        // P rounded to 16 bits; the denominator sums the rounded weights (consistent with P V).
        uint32_t pf[BK / 8][2];
#pragma unroll
        for (int n = 0; n < BK / 8; ++n)
#pragma unroll
            for (int i = 0; i < 2; ++i) {
                pf[n][i] = Op::pack(sc[n][2 * i], sc[n][2 * i + 1]);
                const float2 r = Op::unpack(pf[n][i]);
                l_run[i] += r.x + r.y;
            }

        // O += P V
        const uint32_t v_addr = smem_u32(tV + v_lane_off);
#pragma unroll
        for (int kk = 0; kk < BK / 16; ++kk) {
            const uint32_t af[4] = {pf[2 * kk][0], pf[2 * kk][1], pf[2 * kk + 1][0], pf[2 * kk + 1][1]};
#pragma unroll
            for (int np = 0; np < DP / 16; ++np) {
                uint32_t bf[4];
                ldsm_x4_t(v_addr + (kk * 16 * LD + np * 16) * 2, bf);
                Op::mma(o[2 * np], af, bf[0], bf[1]);
                Op::mma(o[2 * np + 1], af, bf[2], bf[3]);
            }
        }
        __syncthreads();  // every warp is done with this stage before it is refilled
    }
    cp_async_wait<0>();

    // Epilogue: row sums across the quad, then O / l ⊙ sigmoid(gate) or split partials.
#pragma unroll
    for (int i = 0; i < 2; ++i) {
        l_run[i] += __shfl_xor_sync(0xffffffffu, l_run[i], 1);
        l_run[i] += __shfl_xor_sync(0xffffffffu, l_run[i], 2);
    }
#pragma unroll
    for (int i = 0; i < 2; ++i) {
        const int m = warp * 16 + g + 8 * i;
        const int r = m / HG, hl = m - r * HG;
        if (!(r < rows_here && hl < heads_here)) continue;
        const int row = row0 + r, head = head0 + hl;
        if (kDecode && a.splits > 1) {
            const int64_t slot = (int64_t(seq_idx) * a.splits + split) * a.Hq + head;
            float* po = a.part_o + slot * a.D;
#pragma unroll
            for (int n = 0; n < DP / 8; ++n) {
                const int d = n * 8 + 2 * t;
                if (d < a.D) *reinterpret_cast<float2*>(po + d) = make_float2(o[n][2 * i], o[n][2 * i + 1]);
            }
            if (t == 0) a.part_ml[slot] = make_float2(m_run[i], l_run[i]);
        } else {
            const float inv_l = l_run[i] > 0.0f ? 1.0f / l_run[i] : 0.0f;
            const float* gate = a.qg + (int64_t(row) * a.Hq + head) * 2 * a.D + a.D;
            float* dst = a.out + (int64_t(row) * a.Hq + head) * a.D;
#pragma unroll
            for (int n = 0; n < DP / 8; ++n) {
                const int d = n * 8 + 2 * t;
                if (d < a.D) {
                    const float2 gv = *reinterpret_cast<const float2*>(gate + d);
                    *reinterpret_cast<float2*>(dst + d) = make_float2(o[n][2 * i] * inv_l * sigmoidf_(gv.x),
                                                                      o[n][2 * i + 1] * inv_l * sigmoidf_(gv.y));
                }
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// 3. Combine the split-K partials of decode rows: grid (num_seqs, Hq) x 128 threads.

__global__ void __launch_bounds__(128) combine_kernel(const __grid_constant__ Args a) {
    __shared__ float wgt[kMaxSplitsHard];
    __shared__ float inv_total;
    const int seq_idx = blockIdx.x, head = blockIdx.y;
    const DeviceSeq s = a.batch.seqs[seq_idx];
    if (s.num_tokens != 1) return;  // block-uniform
    const int row = s.row_begin;
    const int64_t slot0 = int64_t(seq_idx) * a.splits;
    if (threadIdx.x < 32) {
        float mx = kNegInf;
        for (int sp = threadIdx.x; sp < a.splits; sp += 32) mx = fmaxf(mx, a.part_ml[(slot0 + sp) * a.Hq + head].x);
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
        float tot = 0.0f;
        for (int sp = threadIdx.x; sp < a.splits; sp += 32) {
            const float2 ml = a.part_ml[(slot0 + sp) * a.Hq + head];
            const float w = ml.x == kNegInf ? 0.0f : exp2f(ml.x - mx);
            wgt[sp] = w;
            tot += w * ml.y;
        }
        tot = warp_sum(tot);
        if (threadIdx.x == 0) inv_total = tot > 0.0f ? 1.0f / tot : 0.0f;
    }
    __syncthreads();
    const float* gate = a.qg + (int64_t(row) * a.Hq + head) * 2 * a.D + a.D;
    float* dst = a.out + (int64_t(row) * a.Hq + head) * a.D;
    for (int d = threadIdx.x; d < a.D; d += blockDim.x) {
        float acc = 0.0f;
        for (int sp = 0; sp < a.splits; ++sp) {
            const float w = wgt[sp];
            if (w != 0.0f) acc += w * a.part_o[((slot0 + sp) * a.Hq + head) * a.D + d];
        }
        dst[d] = acc * inv_total * sigmoidf_(gate[d]);
    }
}

// ---------------------------------------------------------------------------------------------
// Host side

int num_sms() {
    static const int n = [] {
        int dev = 0, v = 0;
        QS_CUDA_CHECK(cudaGetDevice(&dev));
        QS_CUDA_CHECK(cudaDeviceGetAttribute(&v, cudaDevAttrMultiProcessorCount, dev));
        return v;
    }();
    return n;
}

// Raises the kernel's dynamic shared-memory limit once and returns its occupancy (blocks/SM).
template <typename CT, int DP, int WARPS, int BK, int STAGES, bool kDecode>
int prepare_attention_kernel() {
    static const int blocks = [] {
        using Cfg = AttnCfg<CT, DP, WARPS, BK, STAGES>;
        auto* fn = attention_kernel<CT, DP, WARPS, BK, STAGES, kDecode>;
        QS_CUDA_CHECK(cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize, int(Cfg::kSmemBytes)));
        int b = 0;
        QS_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&b, fn, Cfg::kThreads, Cfg::kSmemBytes));
        QS_CHECK_MSG(b >= 1, "attention kernel does not fit on one multiprocessor");
        return b;
    }();
    return blocks;
}

template <typename CT, int DP, int WARPS, int BK, int STAGES>
void launch_prefill(const GatedAttentionParams& p, const Args& a, cudaStream_t stream) {
    using Cfg = AttnCfg<CT, DP, WARPS, BK, STAGES>;
    prepare_attention_kernel<CT, DP, WARPS, BK, STAGES, false>();
    const int hg = std::min(a.G, Cfg::kM), nhc = (a.G + hg - 1) / hg, bq = Cfg::kM / hg;
    const int64_t tiles = (int64_t(p.batch.max_seq_tokens) + bq - 1) / bq;
    QS_CHECK_MSG(tiles <= 65535, "too many query tiles in one sequence");
    const dim3 grid(p.batch.num_seqs * p.Hkv * nhc, unsigned(tiles));
    ptx::launch_kernel(attention_kernel<CT, DP, WARPS, BK, STAGES, false>, grid, dim3(Cfg::kThreads), Cfg::kSmemBytes,
                       stream, a);
    QS_CUDA_CHECK_LAUNCH();
}

template <typename CT, int DP>
void launch_all(const GatedAttentionParams& p, Args& a, cudaStream_t stream) {
    constexpr int kDecBK = QS_ATTN_DEC_BK, kDecStages = QS_ATTN_DEC_STAGES;
    constexpr int kPreWarps = QS_ATTN_PRE_WARPS, kPreStages = QS_ATTN_PRE_STAGES;
    constexpr int kPreLongWarps = QS_ATTN_PRE_LONG_WARPS, kPreLongRows = QS_ATTN_PRE_LONG_ROWS;
    constexpr int kPreBK = DP == 256 ? QS_ATTN_PRE_BK : 64;
    const DeviceBatch& b = p.batch;
    const int T = b.num_tokens, S = b.num_seqs;

    ptx::launch_kernel(kv_store_kernel<CT>, dim3((T * p.Hkv + kStoreWarps - 1) / kStoreWarps), dim3(kStoreWarps * 32), 0,
                       stream, a);
    QS_CUDA_CHECK_LAUNCH();
    if (S == 0) return;

    // Decode rows (sequences with one row); the grid is fixed by num_seqs. Skipped when every
    // sequence has max_seq_tokens > 1 rows (a pure prefill batch).
    if (b.max_seq_tokens == 1 || int64_t(S) * b.max_seq_tokens != T) {
        using Cfg = AttnCfg<CT, DP, 1, kDecBK, kDecStages>;
        const int per_sm = prepare_attention_kernel<CT, DP, 1, kDecBK, kDecStages, true>();
        const int hg = std::min(a.G, Cfg::kM), nhc = (a.G + hg - 1) / hg;
        const int64_t base = int64_t(S) * p.Hkv * nhc;
        const int64_t slots = p.workspace ? partial_slots(T, p.max_splits) : 0;
        int splits = 1;
        if (slots >= 2 * int64_t(S)) {
            const int64_t target = int64_t(num_sms()) * per_sm * 2;
            const int64_t want = (target + base - 1) / base;
            splits = int(std::clamp<int64_t>(
                want, 1, std::min<int64_t>({int64_t(p.max_splits), slots / S, int64_t(kMaxSplitsHard)})));
        }
        a.splits = splits;
        const dim3 grid(splits, S, p.Hkv * nhc);
        ptx::launch_kernel(attention_kernel<CT, DP, 1, kDecBK, kDecStages, true>, grid, dim3(Cfg::kThreads),
                           Cfg::kSmemBytes, stream, a);
        QS_CUDA_CHECK_LAUNCH();
        if (splits > 1) {
            ptx::launch_kernel(combine_kernel, dim3(S, p.Hq), dim3(128), 0, stream, a);
            QS_CUDA_CHECK_LAUNCH();
        }
    }
    // Prefill rows (sequences with several rows). Long prompts at D = 256 use 8 warps (128 packed
    // rows share each K/V tile: half the L2 traffic per FLOP of the 4-warp block).
    if (b.max_seq_tokens > 1) {
        if constexpr (DP == 256) {
            if (b.max_seq_tokens >= kPreLongRows) {
                launch_prefill<CT, DP, kPreLongWarps, kPreBK, kPreStages>(p, a, stream);
                return;
            }
        }
        launch_prefill<CT, DP, kPreWarps, kPreBK, kPreStages>(p, a, stream);
    }
}

template <typename CT>
void dispatch_d(const GatedAttentionParams& p, Args& a, cudaStream_t stream) {
    if (p.D <= 64) launch_all<CT, 64>(p, a, stream);
    else if (p.D <= 128) launch_all<CT, 128>(p, a, stream);
    else launch_all<CT, 256>(p, a, stream);
}

}  // namespace

size_t attention_workspace_bytes(int64_t num_tokens, int64_t Hq, int64_t D, int64_t max_splits) {
    const int64_t slots = partial_slots(num_tokens, max_splits);
    if (slots == 0) return 0;
    return align256(size_t(slots * Hq * D) * sizeof(float)) + size_t(slots * Hq) * sizeof(float2);
}

void launch_gated_attention(const GatedAttentionParams& p, cudaStream_t stream) {
    QS_CHECK(p.Hkv > 0 && p.Hq > 0 && p.Hq % p.Hkv == 0);
    QS_CHECK_MSG(p.D % 32 == 0 && p.D >= 32 && p.D <= 256, "head_dim must be a multiple of 32 in [32, 256]");
    QS_CHECK_MSG(p.rotary_dim >= 0 && p.rotary_dim % 2 == 0 && p.rotary_dim <= p.D, "bad rotary_dim");
    QS_CHECK(p.block_size >= 1 && p.max_splits >= 1);
    QS_CHECK(p.qg && p.k && p.v && p.q_norm_w && p.k_norm_w && p.k_cache && p.v_cache && p.out);
    const DeviceBatch& b = p.batch;
    QS_CHECK(b.num_tokens >= 0 && b.num_seqs >= 0);
    if (b.num_tokens == 0) return;
    QS_CHECK(b.positions && b.row_seq && b.seqs && b.block_tables);
    QS_CHECK_MSG(b.max_seq_tokens >= 1 && b.max_seq_tokens <= b.num_tokens,
                 "DeviceBatch counts inconsistent");

    Args a{};
    a.qg = p.qg;
    a.k = p.k;
    a.v = p.v;
    a.q_norm_w = p.q_norm_w;
    a.k_norm_w = p.k_norm_w;
    a.k_cache = p.k_cache;
    a.v_cache = p.v_cache;
    a.batch = b;
    a.out = p.out;
    const int64_t slots = p.workspace ? partial_slots(b.num_tokens, p.max_splits) : 0;
    a.part_o = static_cast<float*>(p.workspace);
    a.part_ml = slots ? reinterpret_cast<float2*>(static_cast<char*>(p.workspace) +
                                                  align256(size_t(slots * p.Hq * p.D) * sizeof(float)))
                      : nullptr;
    a.Hq = p.Hq;
    a.Hkv = p.Hkv;
    a.D = p.D;
    a.G = p.Hq / p.Hkv;
    a.rotary_dim = p.rotary_dim;
    a.block_size = p.block_size;
    a.bs_shift = (p.block_size & (p.block_size - 1)) == 0 ? __builtin_ctz(unsigned(p.block_size)) : -1;
    a.splits = 1;
    a.eps = p.eps;
    // CPU: scale = 1/sqrt(float(D)); exp(x*scale - max) == exp2(x*scale*log2(e) - max*log2(e)).
    a.scale_log2 = (1.0f / std::sqrt(float(p.D))) * 1.4426950408889634f;
    for (int i = 0; i < p.rotary_dim / 2; ++i)  // exactly the CPU's expression (cpu_attention.cpp)
        a.inv_freq[i] = float(1.0 / std::pow(p.rope_theta, double(2 * i) / double(p.rotary_dim)));

    if (p.kv_dtype == DeviceKvDtype::kBF16) dispatch_d<__nv_bfloat16>(p, a, stream);
    else dispatch_d<__nv_fp8_e4m3>(p, a, stream);
}

}  // namespace qs::cuda

// The tensor-core attention kernel shared by decode (attention_decode.cu) and prefill
// (attention_prefill.cu): one template, attention_kernel<CT, DP, WARPS, BK, STAGES, kDecode>, its
// shared-memory plan (AttnCfg), the 16-bit operand type per cache dtype (Op16) and the host-side
// preparation (shared-memory limit, occupancy). Included by those two .cu files only.
//
//  attention_kernel<kDecode=true>: sequences with exactly one row. Block = 1 warp =
//     (split, seq, kv head [, head chunk]); the warp's 16 mma rows are the G query heads of
//     the kv head (G <= 16 per chunk; rows beyond G are zero). The split's key range is
//     computed on the device from the position, so the grid (splits, num_seqs, Hkv*chunks) is
//     context-independent. splits > 1 writes partials, combine_kernel finishes. With
//     Args::dec_rows > 1, sequences of up to dec_rows rows too (an MTP verify): the 16 mma rows
//     are (row, head) pairs of dec_hg heads, each row masked at its own position.
//  attention_kernel<kDecode=false>: sequences with >= 2 rows (prefill chunks, MTP verify).
//     Block = W warps = 16W mma rows = BQ query rows x min(G, 16W) heads packed (row-major in
//     (query row, head)), all sharing one kv head: each K/V tile is read once for the group.
//     W = 4, or 8 for D = 256 when max_seq_tokens >= 64 (K/V tile reuse: L2 traffic per FLOP).
//     Grid (num_seqs*Hkv*chunks, ceil(max_seq_tokens/BQ)); the heaviest (last) query tiles of
//     every sequence are scheduled first. Causal mask: key <= position of the mma row.
// Both variants: q-norm + RoPE of the tile's queries in the prologue (fp32, rounded to
// 16-bit into shared memory), then a cp.async multi-stage pipeline of K/V tiles gathered from the
// page table (keys past the range are zero-filled), S = Q Kᵀ and O += P V with
// mma.sync.m16n8k16 (fp32 accumulate), FA2-style online softmax in fp32 (exp2 domain), and the
// epilogue O / l ⊙ sigmoid(gate). fp8 tiles land raw in shared memory and are converted to f16
// (exact) before the products. D < 256 that is not 64 or 128 runs on the next larger instance
// with zero padding of the head dimension.
#pragma once

#include "backend/cuda/attention_common.cuh"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/device_limits.h"
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

namespace qs::cuda::attn {

using ptx::cp_async16;
using ptx::cp_async_commit;
using ptx::cp_async_wait;
using ptx::ldsm_x4;
using ptx::ldsm_x4_t;
using ptx::smem_u32;

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
    const int G = a.G, HG = kDecode ? a.dec_hg : min(G, M), BQ = M / HG, nhc = (G + HG - 1) / HG;

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
        if (s.num_tokens < 1 || s.num_tokens > a.dec_rows) return;  // dec_rows <= BQ (host)
    } else {
        if (s.num_tokens <= a.dec_rows || tile * BQ >= s.num_tokens) return;
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
        int ctx = 0;  // the split covers the latest row's keys; earlier rows mask theirs (klim)
        for (int r = 0; r < rows_here; ++r) ctx = max(ctx, positions[row0 + r] + 1);
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
        store_query_row<DP, Op>(a, r < rows_here && hl < heads_here, row0 + r, head0 + hl, scratch + warp * DP,
                                sQ + m * LD);
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
            const int64_t slot = (int64_t(a.dec_rows > 1 ? row : seq_idx) * a.splits + split) * a.Hq + head;
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

// Raises the kernel's dynamic shared-memory limit on the current device and returns its occupancy
// (blocks/SM; asked once: every device of a run is the same model of GPU).
template <typename CT, int DP, int WARPS, int BK, int STAGES, bool kDecode>
int prepare_attention_kernel() {
    using Cfg = AttnCfg<CT, DP, WARPS, BK, STAGES>;
    auto* fn = attention_kernel<CT, DP, WARPS, BK, STAGES, kDecode>;
    allow_dynamic_smem<attention_kernel<CT, DP, WARPS, BK, STAGES, kDecode>>(size_t(Cfg::kSmemBytes));
    static const int blocks = [fn] {
        int b = 0;
        QS_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&b, fn, Cfg::kThreads, Cfg::kSmemBytes));
        QS_CHECK_MSG(b >= 1, "attention kernel does not fit on one multiprocessor");
        return b;
    }();
    return blocks;
}

}  // namespace qs::cuda::attn

// Gated attention, decode rows, version 2 (GatedAttentionParams::decode_version 2; issue 15 item 2):
// a streaming split-K kernel for head dims that are multiples of 32 (the others run on the fp32
// fallback either way; D < DP is padded with zeros as in version 1).
// Launched by launch_gated_attention (attention_kernels.cu) after the K/V store, on the caller's
// stream; its partials go through version 1's combine (attention_decode.cu), same contract.
//
// Block = NW warps = (split × head chunk, sequence, kv head). The split's keys [kbeg, kend) are
// cut into tiles of 16 keys; warp w streams tiles w, w + NW, ... through its own cp.async ring of
// STAGES tiles (K and V gathered through the page table), so the warps never wait for each
// other until the end, when they merge their (m, l, O) in shared memory.
// Products with the keys as the mma's M: Sᵀ = K·Qᵀ (m16n8k16: 16 keys × 8 columns, the columns
// the (row, head) pairs of the group: the 8 query heads of a kv head at one row, or dec_hg heads
// × rows for an MTP verify), then Oᵀ += Vᵀ·Pᵀ (16 head dims × 8 columns per mma). No mma row is
// padding, and Q stays in registers as the B operand for the whole split.
// Operands come straight from the ring: a K row's 16 bytes per lane give the A fragments of
// 2 (bf16) or 4 (fp8) k-steps, whose head dims are permuted identically in Q's fragments (a dot
// product does not care about the order); fp8 is widened to f16 in registers (cvt e4m3x2 →
// f16x2, exact) without a shared-memory pass. V: bf16 by ldmatrix.trans; fp8 by 4-byte loads of
// keys 2t, 2t+1 (+8), byte-interleaved (prmt) into f16x2 pairs of keys, which fixes which head
// dims a lane's output rows hold (d_of below). Pᵀ leaves the Sᵀ accumulator in the C layout and
// enters Oᵀ's product as the B operand: one movmatrix.trans per 8 keys.
// Shared memory: the tiles are unpadded rows of DP·sizeof(cache) bytes whose 16-byte chunks are
// XOR-swizzled per key (swz_k, swz_v) so that the fragment loads are free of bank conflicts.
// Numerics as version 1: q and p rounded to bf16 (bf16 cache) or f16 (fp8 cache), fp32 scores,
// softmax (exp2 domain) and accumulation; the denominator sums the rounded p.
#include "backend/cuda/attention_mma.cuh"

// Warps per block and ring depth (tiles of 16 keys per warp) by cache dtype (compile-time; the
// lab compares two alternatives at D 256 through GatedAttentionParams::decode_v2_variant).
#ifndef QS_ATTN_DEC2_WARPS_BF16
#define QS_ATTN_DEC2_WARPS_BF16 4
#endif
#ifndef QS_ATTN_DEC2_STAGES_BF16
#define QS_ATTN_DEC2_STAGES_BF16 3
#endif
#ifndef QS_ATTN_DEC2_WARPS_FP8
#define QS_ATTN_DEC2_WARPS_FP8 4
#endif
#ifndef QS_ATTN_DEC2_STAGES_FP8
#define QS_ATTN_DEC2_STAGES_FP8 3
#endif

namespace qs::cuda::attn {
namespace {

constexpr int kDec2Keys = 16;  // keys of one warp tile (the mma's M)
constexpr int kDec2Cols = 8;   // (row, head) columns of one block (the mma's N)

template <typename CT, int DP, int NW, int STAGES>
struct Dec2Cfg {
    static constexpr bool kFp8 = !std::is_same_v<CT, __nv_bfloat16>;
    using T16 = std::conditional_t<kFp8, __half, __nv_bfloat16>;
    static constexpr int kEs = int(sizeof(CT));
    static constexpr int kRowBytes = DP * kEs;                // one key's row of one kv head
    static constexpr int kChunks = kRowBytes / 16;            // 16-byte chunks per row: 4..32
    static constexpr int kTileBytes = kDec2Keys * kRowBytes;  // K or V of one tile
    static constexpr int kWarpRing = STAGES * 2 * kTileBytes;
    static constexpr int kQLd = DP + 8;  // sQ row stride (16-bit elements)
    static constexpr size_t kQBytes = size_t(kDec2Cols) * kQLd * 2;
    static constexpr size_t kScratchBytes = size_t(NW) * DP * 4;  // norm_rope_warp scratch
    static constexpr size_t kRingOff = kQBytes + kScratchBytes;
    static constexpr size_t kSmemBytes = kRingOff + size_t(NW) * kWarpRing;
    static constexpr int kThreads = NW * 32;
    // A warp's merge record (O [8][DP], m [8], l [8] fp32) reuses its ring once the loop is done.
    static constexpr int kMergeBytes = (kDec2Cols * DP + 2 * kDec2Cols) * 4;
    static_assert(DP % 64 == 0 && DP <= 256 && kChunks >= 4 && kChunks <= 32 && STAGES >= 2);
    static_assert(kMergeBytes <= kWarpRing && kQBytes % 16 == 0 && kScratchBytes % 16 == 0);
};

// K tile: chunk c of key row kl sits at chunk c ^ swz_k(kl). The fragment loads (16 bytes per
// lane, chunks 4c' + t of rows g and g + 1 in one 8-lane phase) then hit disjoint bank groups.
template <int CH>
__device__ __forceinline__ int swz_k(int kl) {
    return CH >= 8 ? (kl & 1) << 2 : 0;
}
// V tile: chunk c ^ swz_v(kl). ldmatrix.trans (8 keys at one chunk per phase) and the fp8 loads
// (4 bytes of keys 2t + e at chunks 2p + g/4) are conflict-free.
template <int CH>
__device__ __forceinline__ int swz_v(int kl) {
    return kl & (CH >= 8 ? 7 : CH - 1);
}

// Two e4m3 values (low byte first) -> f16x2 (exact).
__device__ __forceinline__ uint32_t e4m3x2_to_f16x2(uint32_t lo16) {
    const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(__nv_fp8x2_storage_t(lo16 & 0xffffu), __NV_E4M3);
    return uint32_t(h.x) | (uint32_t(h.y) << 16);
}

// Head dim of the Oᵀ accumulator o[n][2h + e] (d-tile n, row half h) of lane group g.
template <bool kFp8>
__device__ __forceinline__ int d_of(int n, int h, int g) {
    return kFp8 ? 32 * (n >> 1) + 4 * g + 2 * (n & 1) + h : 16 * n + g + 8 * h;
}

template <typename CT, int DP, int NW, int STAGES>
__global__ void __launch_bounds__(NW * 32) decode_v2_kernel(const __grid_constant__ Args a) {
    using Cfg = Dec2Cfg<CT, DP, NW, STAGES>;
    using T16 = typename Cfg::T16;
    using Op = Op16<T16>;
    constexpr bool kFp8 = Cfg::kFp8;
    constexpr int CH = Cfg::kChunks, RB = Cfg::kRowBytes, TB = Cfg::kTileBytes;
    constexpr int E = 16 / Cfg::kEs;  // elements per 16-byte chunk
    constexpr int QPL = E / 4;        // k-steps per chunk (4 head dims of a row per lane and step)
    constexpr int KK = DP / 16;       // k-steps of Sᵀ = d-tiles of Oᵀ

    uint8_t* smem = ptx::dynamic_smem();
    T16* sQ = reinterpret_cast<T16*>(smem);
    float* scratch = reinterpret_cast<float*>(smem + Cfg::kQBytes);
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, t = lane & 3;
    uint8_t* ring = smem + Cfg::kRingOff + size_t(warp) * Cfg::kWarpRing;

    const int G = a.G, HG = a.dec_hg, nhc = (G + HG - 1) / HG;
    const int split = int(blockIdx.x) / nhc, hc = int(blockIdx.x) - split * nhc;
    const int seq_idx = blockIdx.y, kvh = blockIdx.z;
    const DeviceSeq s = a.batch.seqs[seq_idx];
    if (s.num_tokens < 1 || s.num_tokens > a.dec_rows) return;  // block-uniform
    const int head0 = kvh * G + hc * HG, heads_here = min(HG, G - hc * HG);
    const int row0 = s.row_begin, rows_here = s.num_tokens;  // rows_here * HG <= 8 (host)
    const int* positions = a.batch.positions;

    // The split covers the latest row's keys; earlier rows mask theirs (klim).
    int ctx = 0;
    for (int r = 0; r < rows_here; ++r) ctx = max(ctx, positions[row0 + r] + 1);
    const int per = (ctx + a.splits - 1) / a.splits;
    const int chunk = (per + kDec2Keys - 1) / kDec2Keys * kDec2Keys;
    const int kbeg = min(split * chunk, ctx), kend = min(ctx, kbeg + chunk);
    const int ntiles = (kend - kbeg + kDec2Keys - 1) / kDec2Keys;
    const int my_tiles = warp < ntiles ? (ntiles - warp + NW - 1) / NW : 0;

    // This warp's i-th tile (keys kbeg + 16 (warp + i NW) ...) into ring stage `stage`; keys >=
    // kend are zero-filled (a 0 weight times a NaN left in shared memory would poison O).
    const uint8_t* kc = static_cast<const uint8_t*>(a.k_cache);
    const uint8_t* vc = static_cast<const uint8_t*>(a.v_cache);
    const int64_t slot_bytes = int64_t(a.Hkv) * a.D * Cfg::kEs, head_off = int64_t(kvh) * a.D * Cfg::kEs;
    const int row_chunks = a.D * Cfg::kEs / 16;  // CH when D == DP
    const int* bt = a.batch.block_tables + s.block_table_begin;
    constexpr int KPP = 32 / CH;  // keys per pass of the warp
    const int lc = lane % CH, lk = lane / CH;
    // Tiles start at multiples of 16 keys: with pages of 16·2^n keys a tile lies in one page.
    const bool page_per_tile = a.bs_shift >= 4;
    auto load_tile = [&](int i, int stage) {
        const int k0 = kbeg + (warp + i * NW) * kDec2Keys;
        uint8_t* dK = ring + stage * 2 * TB;
        uint8_t* dV = dK + TB;
        int64_t tile_base = 0;  // page_per_tile: offset of key k0
        if (page_per_tile && k0 < kend) {
            const int pi = k0 >> a.bs_shift;
            tile_base = (int64_t(__ldg(bt + pi)) * a.block_size + (k0 - (pi << a.bs_shift))) * slot_bytes;
        }
#pragma unroll
        for (int it = 0; it < kDec2Keys / KPP; ++it) {
            const int kl = it * KPP + lk, key = k0 + kl;
            const bool ok = key < kend;
            int64_t off = 0;
            if (ok) {
                if (page_per_tile) {
                    off = tile_base + kl * slot_bytes + head_off + lc * 16;
                } else {
                    const int pi = a.bs_shift >= 0 ? (key >> a.bs_shift) : key / a.block_size;
                    const int page = __ldg(bt + pi);
                    off = (int64_t(page) * a.block_size + (key - pi * a.block_size)) * slot_bytes + head_off + lc * 16;
                }
            }
            if (lc < row_chunks) {
                ptx::cp_async16(ptx::smem_u32(dK + kl * RB + ((lc ^ swz_k<CH>(kl)) << 4)), kc + off, ok ? 16 : 0);
                ptx::cp_async16(ptx::smem_u32(dV + kl * RB + ((lc ^ swz_v<CH>(kl)) << 4)), vc + off, ok ? 16 : 0);
            }
        }
    };
    if (a.D < DP) {  // head-dim padding: chunks no copy writes stay zero for the whole kernel
        for (int i = lane; i < Cfg::kWarpRing / 16; i += 32)
            *reinterpret_cast<uint4*>(ring + i * 16) = make_uint4(0u, 0u, 0u, 0u);
        __syncwarp();
    }
#pragma unroll
    for (int st = 0; st < STAGES - 1; ++st) {  // first tiles in flight during the query prologue
        if (st < my_tiles) load_tile(st, st);
        ptx::cp_async_commit();
    }

    // Query prologue: q-norm + RoPE of the 8 columns -> sQ (16-bit; unused columns zero).
    for (int c = warp; c < kDec2Cols; c += NW) {
        const int r = c / HG, hl = c - r * HG;
        store_query_row<DP, Op>(a, r < rows_here && hl < heads_here, row0 + r, head0 + hl, scratch + warp * DP,
                                sQ + c * Cfg::kQLd);
    }
    __syncthreads();  // sQ complete

    // Q as the B operand of every k-step: lane (g, t) holds column g at the head dims its K
    // fragments hold (k = 2t, 2t+1 <-> d0, d0+1; k = 2t+8, 2t+9 <-> d0+2, d0+3).
    uint32_t qf[KK][2];
#pragma unroll
    for (int kk = 0; kk < KK; ++kk) {
        const int d0 = (kk / QPL) * 4 * E + t * E + 4 * (kk % QPL);
        qf[kk][0] = *reinterpret_cast<const uint32_t*>(sQ + g * Cfg::kQLd + d0);
        qf[kk][1] = *reinterpret_cast<const uint32_t*>(sQ + g * Cfg::kQLd + d0 + 2);
    }
    // Key limit of this lane's columns 2t, 2t+1: causal bound of the column's row.
    int klim[2];
#pragma unroll
    for (int e = 0; e < 2; ++e) {
        const int c = 2 * t + e, r = c / HG, hl = c - r * HG;
        klim[e] = (r < rows_here && hl < heads_here) ? min(kend, positions[row0 + r] + 1) : kend;
    }

    float o[KK][4];  // Oᵀ: d-tile n, rows (head dims d_of(n, 0|1, g)) x columns 2t, 2t+1
#pragma unroll
    for (int n = 0; n < KK; ++n) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.0f;
    float m_run[2] = {kNegInf, kNegInf}, l_run[2] = {0.0f, 0.0f};

    for (int i = 0; i < my_tiles; ++i) {
        if (i + STAGES - 1 < my_tiles) load_tile(i + STAGES - 1, (i + STAGES - 1) % STAGES);
        ptx::cp_async_commit();
        ptx::cp_async_wait<STAGES - 1>();
        __syncwarp();  // every lane's copies of tile i have landed
        const uint8_t* tK = ring + (i % STAGES) * 2 * TB;
        const uint8_t* tV = tK + TB;

        // Sᵀ = K Qᵀ: rows keys g, g + 8; columns 2t, 2t+1. Two accumulators for mma ILP.
        float sacc[2][4] = {{0.0f, 0.0f, 0.0f, 0.0f}, {0.0f, 0.0f, 0.0f, 0.0f}};
#pragma unroll
        for (int c = 0; c < CH / 4; ++c) {
            const int pc = (4 * c + t) ^ swz_k<CH>(g);  // swz_k(g + 8) == swz_k(g)
            const uint4 r0 = *reinterpret_cast<const uint4*>(tK + g * RB + (pc << 4));
            const uint4 r1 = *reinterpret_cast<const uint4*>(tK + (g + 8) * RB + (pc << 4));
            const uint32_t w0[4] = {r0.x, r0.y, r0.z, r0.w}, w1[4] = {r1.x, r1.y, r1.z, r1.w};
#pragma unroll
            for (int q = 0; q < QPL; ++q) {
                uint32_t af[4];
                if constexpr (kFp8) {
                    af[0] = e4m3x2_to_f16x2(w0[q]);
                    af[1] = e4m3x2_to_f16x2(w1[q]);
                    af[2] = e4m3x2_to_f16x2(w0[q] >> 16);
                    af[3] = e4m3x2_to_f16x2(w1[q] >> 16);
                } else {
                    af[0] = w0[2 * q];
                    af[1] = w1[2 * q];
                    af[2] = w0[2 * q + 1];
                    af[3] = w1[2 * q + 1];
                }
                const int kk = c * QPL + q;
                Op::mma(sacc[kk & 1], af, qf[kk][0], qf[kk][1]);
            }
        }

        // Online softmax per column (log2 domain); a column's keys live in lanes of equal t.
        const int k0 = kbeg + (warp + i * NW) * kDec2Keys;
        float sc[4], alpha[2];
#pragma unroll
        for (int e = 0; e < 2; ++e) {
            const float x0 = k0 + g < klim[e] ? (sacc[0][e] + sacc[1][e]) * a.scale_log2 : kNegInf;
            const float x1 = k0 + g + 8 < klim[e] ? (sacc[0][2 + e] + sacc[1][2 + e]) * a.scale_log2 : kNegInf;
            float mx = fmaxf(x0, x1);
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 4));
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 8));
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 16));
            const float m_new = fmaxf(m_run[e], mx);
            const float base = m_new == kNegInf ? 0.0f : m_new;
            alpha[e] = exp2f(m_run[e] - base);
            m_run[e] = m_new;
            sc[e] = exp2f(x0 - base);
            sc[2 + e] = exp2f(x1 - base);
        }
        // P rounded to 16 bits; the denominator sums the rounded weights (consistent with P V).
        const uint32_t p0 = Op::pack(sc[0], sc[1]), p1 = Op::pack(sc[2], sc[3]);  // keys g, g + 8
        {
            const float2 u0 = Op::unpack(p0), u1 = Op::unpack(p1);
            l_run[0] = l_run[0] * alpha[0] + (u0.x + u1.x);
            l_run[1] = l_run[1] * alpha[1] + (u0.y + u1.y);
        }
        // Pᵀ as the B operand (keys 2t, 2t+1 | 2t+8, 2t+9 of column g): transpose each 8x8.
        const uint32_t b0 = ptx::movmatrix_t(p0), b1 = ptx::movmatrix_t(p1);
#pragma unroll
        for (int n = 0; n < KK; ++n) {
            o[n][0] *= alpha[0];
            o[n][1] *= alpha[1];
            o[n][2] *= alpha[0];
            o[n][3] *= alpha[1];
        }

        // Oᵀ += Vᵀ Pᵀ
        if constexpr (!kFp8) {
            // ldmatrix.trans: matrix j = lane / 8 covers keys 8 (j / 2) .. + 7 at head dims 16 n + 8 (j % 2).
            const int vk = (lane & 7) + ((lane >> 4) << 3), vhalf = (lane >> 3) & 1, vsw = swz_v<CH>(vk);
            const uint32_t vrow = ptx::smem_u32(tV + vk * RB);
#pragma unroll
            for (int n = 0; n < KK; ++n) {
                uint32_t af[4];
                ptx::ldsm_x4_t(vrow + (((2 * n + vhalf) ^ vsw) << 4), af);
                Op::mma(o[n], af, b0, b1);
            }
        } else {
            // Per pair of d-tiles: 4 head dims 32 pp + 4 g + j of keys 2t, 2t+1, 2t+8, 2t+9; j = 0, 1
            // are tile 2 pp's rows g, g + 8, j = 2, 3 tile 2 pp + 1's (d_of).
            const int wd = (g & 3) * 4;
            const int r0 = (2 * t) * RB, r1 = r0 + RB, r2 = r0 + 8 * RB, r3 = r2 + RB;
            const int s0 = swz_v<CH>(2 * t), s1 = swz_v<CH>(2 * t + 1);  // keys + 8: the same
#pragma unroll
            for (int pp = 0; pp < KK / 2; ++pp) {
                const int chv = 2 * pp + (g >> 2);
                const uint32_t x0 = *reinterpret_cast<const uint32_t*>(tV + r0 + ((chv ^ s0) << 4) + wd);
                const uint32_t x1 = *reinterpret_cast<const uint32_t*>(tV + r1 + ((chv ^ s1) << 4) + wd);
                const uint32_t x2 = *reinterpret_cast<const uint32_t*>(tV + r2 + ((chv ^ s0) << 4) + wd);
                const uint32_t x3 = *reinterpret_cast<const uint32_t*>(tV + r3 + ((chv ^ s1) << 4) + wd);
                const uint32_t lo01 = ptx::prmt2(x0, x1, 0x5140u), hi01 = ptx::prmt2(x0, x1, 0x7362u);
                const uint32_t lo23 = ptx::prmt2(x2, x3, 0x5140u), hi23 = ptx::prmt2(x2, x3, 0x7362u);
                const uint32_t a0[4] = {e4m3x2_to_f16x2(lo01), e4m3x2_to_f16x2(lo01 >> 16), e4m3x2_to_f16x2(lo23),
                                        e4m3x2_to_f16x2(lo23 >> 16)};
                const uint32_t a1[4] = {e4m3x2_to_f16x2(hi01), e4m3x2_to_f16x2(hi01 >> 16), e4m3x2_to_f16x2(hi23),
                                        e4m3x2_to_f16x2(hi23 >> 16)};
                Op::mma(o[2 * pp], a0, b0, b1);
                Op::mma(o[2 * pp + 1], a1, b0, b1);
            }
        }
        __syncwarp();  // the whole warp is done with this stage before it is refilled
    }
    ptx::cp_async_wait<0>();
    __syncwarp();

    // Merge the warps: each writes (O, m, l) over its own ring, then the block combines them.
#pragma unroll
    for (int e = 0; e < 2; ++e) {
        l_run[e] += __shfl_xor_sync(0xffffffffu, l_run[e], 4);
        l_run[e] += __shfl_xor_sync(0xffffffffu, l_run[e], 8);
        l_run[e] += __shfl_xor_sync(0xffffffffu, l_run[e], 16);
    }
    {
        float* mo = reinterpret_cast<float*>(ring);  // [8][DP], then m [8], l [8]
#pragma unroll
        for (int n = 0; n < KK; ++n)
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const int d = d_of<kFp8>(n, h, g);
                mo[(2 * t) * DP + d] = o[n][2 * h];
                mo[(2 * t + 1) * DP + d] = o[n][2 * h + 1];
            }
        if (g == 0) {
#pragma unroll
            for (int e = 0; e < 2; ++e) {
                mo[kDec2Cols * DP + 2 * t + e] = m_run[e];
                mo[kDec2Cols * DP + kDec2Cols + 2 * t + e] = l_run[e];
            }
        }
    }
    __syncthreads();
    const float* rec = reinterpret_cast<const float*>(smem + Cfg::kRingOff);
    constexpr int kRecStride = Cfg::kWarpRing / 4;  // floats between two warps' records
    for (int idx = tid; idx < kDec2Cols * DP; idx += Cfg::kThreads) {
        const int c = idx / DP, d = idx - c * DP;
        const int r = c / HG, hl = c - r * HG;
        if (!(r < rows_here && hl < heads_here) || d >= a.D) continue;
        float mx = kNegInf;
#pragma unroll
        for (int w = 0; w < NW; ++w) mx = fmaxf(mx, rec[w * kRecStride + kDec2Cols * DP + c]);
        float acc = 0.0f, l = 0.0f;
#pragma unroll
        for (int w = 0; w < NW; ++w) {
            const float* rw = rec + w * kRecStride;
            const float mw = rw[kDec2Cols * DP + c];
            const float wt = mw == kNegInf ? 0.0f : exp2f(mw - mx);
            acc += wt * rw[c * DP + d];
            l += wt * rw[kDec2Cols * DP + kDec2Cols + c];
        }
        const int row = row0 + r, head = head0 + hl;
        if (a.splits > 1) {
            const int64_t slot = (int64_t(a.dec_rows > 1 ? row : seq_idx) * a.splits + split) * a.Hq + head;
            a.part_o[slot * a.D + d] = acc;
            if (d == 0) a.part_ml[slot] = make_float2(mx, l);
        } else {
            const float gate = a.qg[(int64_t(row) * a.Hq + head) * 2 * a.D + a.D + d];
            a.out[(int64_t(row) * a.Hq + head) * a.D + d] = acc * (l > 0.0f ? 1.0f / l : 0.0f) * sigmoidf_(gate);
        }
    }
}

template <typename CT, int DP, int NW, int STAGES>
void launch_v2(const GatedAttentionParams& p, Args& a, cudaStream_t stream) {
    using Cfg = Dec2Cfg<CT, DP, NW, STAGES>;
    auto* fn = decode_v2_kernel<CT, DP, NW, STAGES>;
    allow_dynamic_smem<decode_v2_kernel<CT, DP, NW, STAGES>>(size_t(Cfg::kSmemBytes));
    static const int per_sm = [fn] {  // blocks per SM (every device of a run is the same GPU model)
        int b = 0;
        QS_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&b, fn, Cfg::kThreads, Cfg::kSmemBytes));
        QS_CHECK_MSG(b >= 1, "decode attention v2 does not fit on one multiprocessor");
        return b;
    }();
    const int S = p.batch.num_seqs;
    // Columns are (row, head) pairs: dec_rows rows of dec_hg heads fit the mma's 8.
    a.dec_hg = std::max(1, std::min(a.G, kDec2Cols / a.dec_rows));
    const int nhc = (a.G + a.dec_hg - 1) / a.dec_hg;
    a.splits = decode_split_count(p, a, int64_t(S) * p.Hkv * nhc, per_sm);
    const dim3 grid(unsigned(a.splits * nhc), unsigned(S), unsigned(p.Hkv));
    ptx::launch_kernel(fn, grid, dim3(Cfg::kThreads), Cfg::kSmemBytes, stream, a);
    QS_CUDA_CHECK_LAUNCH();
    if (a.splits > 1) launch_decode_combine(a, stream);
}

}  // namespace

bool decode_v2_applies(int D) { return D % 32 == 0 && D >= 32 && D <= 256; }

template <typename CT, int DP>
void launch_decode_v2(const GatedAttentionParams& p, Args& a, cudaStream_t stream) {
    QS_CHECK(p.D <= DP && decode_v2_applies(p.D));
    constexpr bool kBf16 = std::is_same_v<CT, __nv_bfloat16>;
    // Lab-only alternatives at D 256 (GatedAttentionParams::decode_v2_variant): fewer warps (2
    // blocks per SM) or a shallower ring for bf16; a deeper ring or 8 warps for fp8.
    if constexpr (DP == 256) {
        if (p.decode_v2_variant == 1) {
            if constexpr (kBf16) launch_v2<CT, DP, 2, 3>(p, a, stream);
            else launch_v2<CT, DP, 4, 5>(p, a, stream);
            return;
        }
        if (p.decode_v2_variant == 2) {
            if constexpr (kBf16) launch_v2<CT, DP, 4, 2>(p, a, stream);
            else launch_v2<CT, DP, 8, 2>(p, a, stream);
            return;
        }
    }
    if constexpr (kBf16) launch_v2<CT, DP, QS_ATTN_DEC2_WARPS_BF16, QS_ATTN_DEC2_STAGES_BF16>(p, a, stream);
    else launch_v2<CT, DP, QS_ATTN_DEC2_WARPS_FP8, QS_ATTN_DEC2_STAGES_FP8>(p, a, stream);
}

template void launch_decode_v2<__nv_bfloat16, 64>(const GatedAttentionParams&, Args&, cudaStream_t);
template void launch_decode_v2<__nv_bfloat16, 128>(const GatedAttentionParams&, Args&, cudaStream_t);
template void launch_decode_v2<__nv_bfloat16, 256>(const GatedAttentionParams&, Args&, cudaStream_t);
template void launch_decode_v2<__nv_fp8_e4m3, 64>(const GatedAttentionParams&, Args&, cudaStream_t);
template void launch_decode_v2<__nv_fp8_e4m3, 128>(const GatedAttentionParams&, Args&, cudaStream_t);
template void launch_decode_v2<__nv_fp8_e4m3, 256>(const GatedAttentionParams&, Args&, cudaStream_t);

}  // namespace qs::cuda::attn

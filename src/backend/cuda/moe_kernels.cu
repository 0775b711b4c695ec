// Sparse MoE block on the GPU: routing, sort by expert, grouped GEMMs, combine.
// CPU reference: CpuOps::moe (src/backend/cpu/cpu_moe.cpp); maths in moe_kernels.h.
//
// Stages (one stream, no host synchronisation; the host never learns per-expert counts):
//  1. moe_route_kernel   grid ceil(T/8) × 256 threads, one warp per token: fp32 softmax over E,
//                        top-k (ties to the lower index), renormalisation → topk_id/topk_w [T, k];
//                        also x [T, H] fp32 → xb [T, H] bf16 (the GEMM's A operand).
//  2. moe_sort_kernel<BM> one block of 1024 threads: per-expert counts (shared atomics), exclusive
//                        scans, the tile list (one int4 {expert, first sorted row, rows, 0} per
//                        BM-row tile of each non-empty expert; the shared expert is expert E with
//                        rows T·k + t for every token t), and the scatter of the pairs:
//                        row_token[r] = t, row_dest[r] = t·k + j (T·k + t for the shared expert).
//                        Rows of one expert are in atomic (arbitrary) order; every row's arithmetic
//                        is independent of its position, so the result is bitwise deterministic.
//  3. moe_gemm_kernel<gate_up>  grid (max(I, I_shared)/BN, max_tiles), blocks past the tile count
//                        (or past the expert's I_e) exit at once. Block = one (tile, BN columns of
//                        I_e): A = BM gathered rows of xb, B = gate rows [n0, n0+BN) and up rows
//                        [n0, n0+BN) of the expert; epilogue h = silu(g)·u → hbuf [R, Imax] bf16.
//  4. moe_gemm_kernel<down>     grid (H/BNW, max_tiles): A = hbuf rows of the tile (contiguous), B =
//                        down rows [n0, n0+BNW), K = I_e; epilogue writes fp32 rows
//                        eout[row_dest[r], n0..] (eout [T·(k+1), H]).
//  5. moe_combine_kernel grid T: y_t = Σ_j w_tj · eout[t·k+j] (in j order) + σ(sg_t) · eout[T·k+t].
//
// GEMM: mma.sync m16n8k16 bf16 → fp32, BK = 64, a STAGES-deep cp.async (16-byte, L2-only)
// pipeline. K is permuted consistently for A and B inside each k16 step so that every fragment
// comes from one 16-byte shared-memory load: in a 64-wide K stage, lane (g = lane/4, q = lane%4),
// half h and k16 step s hold fragment positions {2q, 2q+1, 2q+8, 2q+9} = actual k 16q+8h+4s+{0..3}.
// Shared layouts: A rows 128 B (64 bf16), 16-byte chunk c of row m stored at chunk c ^ (m & 1)
// (conflict-free for that access pattern); B rows 128 B (bf16, same swizzle) or 64 B (fp8, plain).
// FP8 (e4m3, 128×128 block scale_inv): weights become bf16 exactly, up to a power of two (bit moves,
// see e4m3x4_to_bf16x2_scaled), the MMA accumulates each 128-wide K block into a temporary, and the
// temporary is added to the accumulator times the block's scale_inv (a BN- or BNW-row tile lies
// inside one 128-row scale block); the fp8 path's A operands carry a 2^64 factor (kFp8AScale).
// Tile configurations (BM rows × BNW weight rows): decode 16×64 (a few tokens: more blocks),
// 16×128 or 32×128 with 4 warps (1×4), prefill 128×128 with 8 warps (2×4); chosen from T·k/E by the
// host (MoeParams::tile_config).
// The whole file also compiles as host C++ for the CPU emulation test (bench/kernels/moe_emu.cpp).
#include "backend/cuda/moe_kernels.h"

#include <algorithm>
#include <cuda_bf16.h>

#include "backend/cuda/cuda_check.h"
#include "core/check.h"
#if !defined(QS_MOE_EMULATE)
#include "backend/cuda/ptx_helpers.cuh"  // the emulation shim defines qs::cuda::ptx itself
#endif

namespace qs::cuda {

namespace {

constexpr int kRouteWarps = 8;
constexpr int kSortThreads = 1024;
constexpr int kCombineThreads = 256;
constexpr int kBK = 64;

// ---------------------------------------------------------------------------------------------
// Workspace layout
// ---------------------------------------------------------------------------------------------

int64_t max_tiles_for(int64_t bm, int64_t T, int64_t E, int64_t k) {
    const int64_t routed = T * k;
    const int64_t nonempty = std::min(E, routed);
    return (routed + nonempty * (bm - 1)) / bm + (T + bm - 1) / bm;
}

struct WsLayout {
    size_t topk_id, topk_w, xb, num_tiles, work, row_token, row_dest, hbuf, eout, total;
};

WsLayout ws_layout(int64_t T, int64_t H, int64_t I, int64_t I_shared, int64_t E, int64_t k) {
    WsLayout L{};
    size_t off = 0;
    auto take = [&](size_t bytes) {
        const size_t o = off;
        off = (off + bytes + 255) & ~size_t(255);
        return o;
    };
    const int64_t R = T * (k + 1);
    const int64_t imax = std::max(I, I_shared);
    L.topk_id = take(size_t(T * k) * 4);
    L.topk_w = take(size_t(T * k) * 4);
    L.xb = take(size_t(T * H) * 2);
    L.num_tiles = take(16);
    L.work = take(size_t(max_tiles_for(16, T, E, k)) * 16);  // BM=16 has the most tiles
    L.row_token = take(size_t(R) * 4);
    L.row_dest = take(size_t(R) * 4);
    L.hbuf = take(size_t(R * imax) * 2);
    L.eout = take(size_t(R * H) * 4);
    L.total = off;
    return L;
}

// ---------------------------------------------------------------------------------------------
// Small device helpers
// ---------------------------------------------------------------------------------------------

using ptx::cp_async16;
using ptx::cp_async_commit;
using ptx::cp_async_wait;
using ptx::mma_16816_bf16;
using ptx::prmt;
using ptx::smem_u32;

// FP8 operand scaling. Four e4m3 bytes become two bf16x2 words holding value·2^-120 exactly by
// moving the sign, exponent and mantissa bits into place (3 integer instructions per pair; e4m3
// subnormals become bf16 subnormals, zeros stay zero). So that no product x·w·2^-120 comes near the
// fp32 subnormal range inside the MMA, the fp8 path stores its A operands (xb and h) times 2^64,
// and the 128-block promotion multiplies by scale_inv · 2^56: (x·2^64)(w·2^-120)·2^56 = x·w.
constexpr float kFp8AScale = 18446744073709551616.0f;  // 2^64
constexpr float kFp8Unscale = 72057594037927936.0f;    // 2^56

// e4m3 bytes b0..b3 of w (b0 = lowest k) → lo = bf16x2(b0, b1), hi = bf16x2(b2, b3), times 2^-120.
__device__ __forceinline__ void e4m3x4_to_bf16x2_scaled(uint32_t w, uint32_t& lo, uint32_t& hi) {
    // Each 16-bit half becomes [byte, sign-of-byte replicated]; << 4 puts the sign at bit 15, the
    // exponent at bits 10:7 and the mantissa at 6:4; the mask drops the replicas and the bits that
    // the shift carried over from the lower half.
    lo = (prmt(w, 0x9180u) << 4) & 0x87F087F0u;
    hi = (prmt(w, 0xB3A2u) << 4) & 0x87F087F0u;
}

__device__ __forceinline__ uint32_t pack_bf16x2(float lo, float hi) {
    const __nv_bfloat162 b = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<const uint32_t*>(&b);
}

// ---------------------------------------------------------------------------------------------
// 1. Routing
// ---------------------------------------------------------------------------------------------

struct RouteParams {
    const float* x;              // [T, H]
    const float* router_logits;  // [T, E]
    int T, E, H, k;
    bool norm_topk_prob;
    int* topk_id;                // [T, k]
    float* topk_w;               // [T, k]
    __nv_bfloat16* xb;           // [T, H] = bf16(x · x_scale)
    float x_scale;               // 1, or kFp8AScale for fp8 weights
};

// VPL = values per lane = ceil(E / 32) rounded up to the instantiated size.
template <int VPL>
__global__ __launch_bounds__(kRouteWarps * 32) void moe_route_kernel(RouteParams p) {
    const int lane = threadIdx.x & 31;
    const int t = blockIdx.x * kRouteWarps + (threadIdx.x >> 5);
    if (t >= p.T) return;
    const float* l = p.router_logits + size_t(t) * p.E;

    float v[VPL];
    float mx = -INFINITY;
#pragma unroll
    for (int i = 0; i < VPL; ++i) {
        const int e = lane + 32 * i;
        v[i] = e < p.E ? l[e] : -INFINITY;
        mx = fmaxf(mx, v[i]);
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
    float sum = 0.0f;
#pragma unroll
    for (int i = 0; i < VPL; ++i) {
        const int e = lane + 32 * i;
        v[i] = e < p.E ? expf(v[i] - mx) : 0.0f;
        sum += v[i];
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
#pragma unroll
    for (int i = 0; i < VPL; ++i) {
        const int e = lane + 32 * i;
        v[i] = e < p.E ? v[i] / sum : -1.0f;  // -1: not a candidate (probabilities are >= 0)
    }

    // Top-k: k rounds of a warp arg-max over (p desc, index asc); lane j keeps the j-th pick.
    int my_id = 0;
    float my_p = 0.0f;
    for (int j = 0; j < p.k; ++j) {
        float best = -2.0f;
        int bi = 0x7fffffff;
#pragma unroll
        for (int i = 0; i < VPL; ++i) {
            if (v[i] > best) {  // indices rise with i, so strict '>' keeps the lower index on ties
                best = v[i];
                bi = lane + 32 * i;
            }
        }
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) {
            const float ob = __shfl_xor_sync(0xffffffffu, best, o);
            const int oi = __shfl_xor_sync(0xffffffffu, bi, o);
            if (ob > best || (ob == best && oi < bi)) {
                best = ob;
                bi = oi;
            }
        }
        if (lane == j) {
            my_id = bi;
            my_p = best;
        }
#pragma unroll
        for (int i = 0; i < VPL; ++i)
            if (lane + 32 * i == bi) v[i] = -1.0f;
    }
    float top_sum = 0.0f;  // summed in top-k order, as the CPU does
    for (int j = 0; j < p.k; ++j) top_sum += __shfl_sync(0xffffffffu, my_p, j);
    if (lane < p.k) {
        p.topk_id[size_t(t) * p.k + lane] = my_id;
        p.topk_w[size_t(t) * p.k + lane] = p.norm_topk_prob ? my_p / top_sum : my_p;
    }

    const float4* xs = reinterpret_cast<const float4*>(p.x + size_t(t) * p.H);
    uint2* xd = reinterpret_cast<uint2*>(p.xb + size_t(t) * p.H);
    for (int c = lane; c < p.H / 4; c += 32) {
        const float4 f = xs[c];
        const float sc = p.x_scale;
        xd[c] = make_uint2(pack_bf16x2(f.x * sc, f.y * sc), pack_bf16x2(f.z * sc, f.w * sc));
    }
}

// ---------------------------------------------------------------------------------------------
// 2. Sort by expert + tile list (one block)
// ---------------------------------------------------------------------------------------------

struct SortParams {
    const int* topk_id;  // [T, k]
    int T, E, k;
    int* num_tiles;      // [1]
    int4* work;          // [max_tiles] {expert, first sorted row, rows, 0}
    int* row_token;      // [T·(k+1)]
    int* row_dest;       // [T·(k+1)]
};

// Exclusive scan over the block (one value per thread); *total gets the sum.
__device__ int block_exclusive_scan(int v, int* warp_sums, int* total) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    int inc = v;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
        const int n = __shfl_up_sync(0xffffffffu, inc, o);
        if (lane >= o) inc += n;
    }
    if (lane == 31) warp_sums[warp] = inc;
    __syncthreads();
    if (warp == 0) {
        const int nw = blockDim.x >> 5;
        int s = lane < nw ? warp_sums[lane] : 0;
#pragma unroll
        for (int o = 1; o < 32; o <<= 1) {
            const int n = __shfl_up_sync(0xffffffffu, s, o);
            if (lane >= o) s += n;
        }
        warp_sums[lane] = s;  // inclusive prefix of the warp totals
    }
    __syncthreads();
    const int base = warp > 0 ? warp_sums[warp - 1] : 0;
    *total = warp_sums[(blockDim.x >> 5) - 1];
    __syncthreads();  // warp_sums is reused by the next scan
    return base + inc - v;
}

template <int BM>
__global__ __launch_bounds__(kSortThreads) void moe_sort_kernel(SortParams p) {
    __shared__ int s_cnt[kSortThreads];
    __shared__ int s_off[kSortThreads];
    __shared__ int s_warp[32];
    const int tid = threadIdx.x;
    const int E = p.E, n_pairs = p.T * p.k;

    s_cnt[tid] = tid == E ? p.T : 0;  // expert E = the shared expert, all T tokens
    __syncthreads();
    constexpr int kU = 8;
    for (int base = 0; base < n_pairs; base += kSortThreads * kU) {
        int ids[kU];
#pragma unroll
        for (int u = 0; u < kU; ++u) {
            const int i = base + u * kSortThreads + tid;
            ids[u] = i < n_pairs ? p.topk_id[i] : -1;
        }
#pragma unroll
        for (int u = 0; u < kU; ++u)
            if (ids[u] >= 0) atomicAdd(&s_cnt[ids[u]], 1);
    }
    __syncthreads();

    const int cnt = tid <= E ? s_cnt[tid] : 0;
    const int tiles = (cnt + BM - 1) / BM;
    int total_rows, total_tiles;
    const int row_off = block_exclusive_scan(cnt, s_warp, &total_rows);
    const int tile_off = block_exclusive_scan(tiles, s_warp, &total_tiles);
    if (tid <= E) s_off[tid] = row_off;
    if (tid == 0) *p.num_tiles = total_tiles;
    for (int i = 0; i < tiles; ++i)
        p.work[tile_off + i] = make_int4(tid, row_off + i * BM, cnt - i * BM < BM ? cnt - i * BM : BM, 0);
    s_cnt[tid] = 0;  // reused as per-expert cursors (every read of s_cnt happened before the scans' barriers)
    __syncthreads();

    for (int base = 0; base < n_pairs; base += kSortThreads * kU) {
        int ids[kU];
#pragma unroll
        for (int u = 0; u < kU; ++u) {
            const int i = base + u * kSortThreads + tid;
            ids[u] = i < n_pairs ? p.topk_id[i] : -1;
        }
#pragma unroll
        for (int u = 0; u < kU; ++u) {
            if (ids[u] < 0) continue;
            const int i = base + u * kSortThreads + tid;
            const int r = s_off[ids[u]] + atomicAdd(&s_cnt[ids[u]], 1);
            p.row_token[r] = i / p.k;
            p.row_dest[r] = i;
        }
    }
    const int shared_off = s_off[E];  // == T·k
    for (int t = tid; t < p.T; t += kSortThreads) {
        p.row_token[shared_off + t] = t;
        p.row_dest[shared_off + t] = n_pairs + t;
    }
}

// ---------------------------------------------------------------------------------------------
// 3./4. Grouped GEMMs
// ---------------------------------------------------------------------------------------------

template <int BM_, int BNW_, int WARPS_M_, int WARPS_N_, int STAGES_BF16_, int STAGES_FP8_>
struct TileCfg {
    static constexpr int BM = BM_, BNW = BNW_, WARPS_M = WARPS_M_, WARPS_N = WARPS_N_;
    static constexpr int STAGES_BF16 = STAGES_BF16_, STAGES_FP8 = STAGES_FP8_;
};
using CfgS16 = TileCfg<16, 128, 1, 4, 4, 6>;
using CfgS16N = TileCfg<16, 64, 1, 4, 6, 8>;  // narrow: twice the blocks, for a handful of tokens
using CfgS32 = TileCfg<32, 128, 1, 4, 4, 6>;
using CfgL128 = TileCfg<128, 128, 2, 4, 3, 4>;

struct GemmParams {
    const int4* work;
    const int* num_tiles;
    const __nv_bfloat16* a;  // gate_up: xb [T, H]; down: hbuf [R, lda]
    int lda;                 // elements
    const int* row_token;    // gate_up: A row of sorted row r
    const int* row_dest;     // down: output row of sorted row r
    const void* const* w0;   // gate_up: gate; down: down
    const void* const* w1;   // gate_up: up
    const float* const* s0;  // fp8 scale_inv of w0
    const float* const* s1;  // fp8 scale_inv of w1
    int E, H, I, I_shared;
    __nv_bfloat16* h_out;    // gate_up: hbuf [R, ldh]
    int ldh;
    float* y_out;            // down: eout [T·(k+1), H]
};

template <class Cfg, bool FP8>
struct GemmShape {
    static constexpr int NTHR = Cfg::WARPS_M * Cfg::WARPS_N * 32;
    static constexpr int STAGES = FP8 ? Cfg::STAGES_FP8 : Cfg::STAGES_BF16;
    static constexpr int A_STAGE = Cfg::BM * kBK * 2;
    static constexpr int B_ROW = FP8 ? kBK : kBK * 2;
    static constexpr int B_STAGE = Cfg::BNW * B_ROW;
    static constexpr int SMEM = STAGES * (A_STAGE + B_STAGE);
};

template <class Cfg, bool FP8, bool GATE_UP>
__global__ __launch_bounds__(GemmShape<Cfg, FP8>::NTHR) void moe_gemm_kernel(GemmParams p) {
    using S = GemmShape<Cfg, FP8>;
    constexpr int BM = Cfg::BM, BNW = Cfg::BNW, NTHR = S::NTHR, STAGES = S::STAGES;
    constexpr int WM = BM / Cfg::WARPS_M, WNW = BNW / Cfg::WARPS_N;
    constexpr int MT = WM / 16, NT = WNW / 8;
    constexpr int ELEM = FP8 ? 1 : 2;                  // weight bytes per element
    constexpr int B_CH = S::B_ROW / 16;                // 16-byte chunks per B row per stage
    constexpr int A_ITERS = BM * 8 / NTHR, B_ITERS = BNW * B_CH / NTHR;
    static_assert(WM % 16 == 0 && WNW % 16 == 0 && NT % 2 == 0, "warp tile");
    static_assert(BM * 8 % NTHR == 0 && BNW * B_CH % NTHR == 0, "loader split");
    static_assert(!FP8 || (128 % (GATE_UP ? BNW / 2 : BNW) == 0), "fp8 tile inside one scale block");

    unsigned char* smem = ptx::dynamic_smem();
    unsigned char* sA = smem;
    unsigned char* sB = smem + STAGES * S::A_STAGE;

    const int tile = blockIdx.y;
    if (tile >= *p.num_tiles) return;
    const int4 wk = p.work[tile];
    const int e = wk.x, row0 = wk.y, rows = wk.z;
    const int Ie = e == p.E ? p.I_shared : p.I;
    int n0, K;
    if constexpr (GATE_UP) {
        n0 = blockIdx.x * (BNW / 2);
        if (n0 >= Ie) return;
        K = p.H;
    } else {
        n0 = blockIdx.x * BNW;
        K = Ie;
    }
    const int KT = K / kBK;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int warp_m = warp / Cfg::WARPS_N, warp_n = warp % Cfg::WARPS_N;
    const int g = lane >> 2, q = lane & 3;

    // Per-thread loader sources (fixed across K stages) and shared destinations.
    const __nv_bfloat16* a_src[A_ITERS];
    uint32_t a_dst[A_ITERS];
    int a_bytes[A_ITERS];
#pragma unroll
    for (int i = 0; i < A_ITERS; ++i) {
        const int c = tid + i * NTHR, m = c >> 3, ch = c & 7;
        const bool valid = m < rows;
        int src_row;
        if constexpr (GATE_UP) src_row = p.row_token[row0 + (valid ? m : 0)];
        else src_row = row0 + (valid ? m : 0);
        a_src[i] = p.a + size_t(src_row) * p.lda + ch * 8;
        a_dst[i] = smem_u32(sA) + m * 128 + ((ch ^ (m & 1)) * 16);
        a_bytes[i] = valid ? 16 : 0;  // rows past the tile are zero-filled
    }
    const unsigned char* b_src[B_ITERS];
    uint32_t b_dst[B_ITERS];
    {
        const unsigned char* w0 = static_cast<const unsigned char*>(p.w0[e]);
        const unsigned char* w1 = GATE_UP ? static_cast<const unsigned char*>(p.w1[e]) : nullptr;
#pragma unroll
        for (int i = 0; i < B_ITERS; ++i) {
            const int c = tid + i * NTHR, r = c / B_CH, ch = c % B_CH;
            const unsigned char* mat = w0;
            int wrow;
            if constexpr (GATE_UP) {
                // Warp slot ws holds gate rows then up rows of the same WNW/2 columns.
                const int ws = r / WNW, wi = r % WNW, half = WNW / 2;
                if (wi < half) {
                    wrow = n0 + ws * half + wi;
                } else {
                    mat = w1;
                    wrow = n0 + ws * half + wi - half;
                }
            } else {
                wrow = n0 + r;
            }
            b_src[i] = mat + (size_t(wrow) * K + ch * (16 / ELEM)) * ELEM;
            b_dst[i] = smem_u32(sB) + r * S::B_ROW + (FP8 ? ch * 16 : ((ch ^ (r & 1)) * 16));
        }
    }
    auto load_stage = [&](int kt, int slot) {
#pragma unroll
        for (int i = 0; i < A_ITERS; ++i)
            cp_async16(a_dst[i] + slot * S::A_STAGE, a_src[i] + kt * kBK, a_bytes[i]);
#pragma unroll
        for (int i = 0; i < B_ITERS; ++i)
            cp_async16(b_dst[i] + slot * S::B_STAGE, b_src[i] + size_t(kt) * kBK * ELEM, 16);
    };

    const float* sc0 = nullptr;
    const float* sc1 = nullptr;
    int sc_stride = 0, sc_row = 0;
    if constexpr (FP8) {
        sc0 = p.s0[e];
        if constexpr (GATE_UP) sc1 = p.s1[e];
        sc_stride = (K + 127) / 128;
        sc_row = n0 / 128;
    }

    float acc[MT][NT][4];
    float tmp[FP8 ? MT : 1][FP8 ? NT : 1][4];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int j = 0; j < NT; ++j)
#pragma unroll
            for (int r = 0; r < 4; ++r) acc[mt][j][r] = 0.0f;
    if constexpr (FP8) {
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
            for (int j = 0; j < NT; ++j)
#pragma unroll
                for (int r = 0; r < 4; ++r) tmp[mt][j][r] = 0.0f;
    }

#pragma unroll
    for (int s = 0; s < STAGES - 1; ++s) {
        if (s < KT) load_stage(s, s);
        cp_async_commit();
    }

    for (int kt = 0; kt < KT; ++kt) {
        cp_async_wait<STAGES - 2>();
        __syncthreads();  // stage kt visible to all; slot (kt-1)%STAGES no longer read by anyone
        {
            const int nk = kt + STAGES - 1;
            if (nk < KT) load_stage(nk, nk % STAGES);
            cp_async_commit();
        }
        float s_a = 0.0f, s_b = 0.0f;  // fp8 scale_inv of this K block (loaded early, used after the MMAs)
        const bool promote = FP8 && ((kt & 1) || kt == KT - 1);
        if constexpr (FP8) {
            if (promote) {
                s_a = sc0[sc_row * sc_stride + (kt >> 1)] * kFp8Unscale;
                if constexpr (GATE_UP) s_b = sc1[sc_row * sc_stride + (kt >> 1)] * kFp8Unscale;
            }
        }

        const int slot = kt % STAGES;
        const unsigned char* a_s = sA + slot * S::A_STAGE;
        const unsigned char* b_s = sB + slot * S::B_STAGE;
        uint4 braw[FP8 ? NT : 1];
        if constexpr (FP8) {
#pragma unroll
            for (int j = 0; j < NT; ++j)
                braw[j] = *reinterpret_cast<const uint4*>(b_s + (warp_n * WNW + j * 8 + g) * S::B_ROW + q * 16);
        }
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            uint32_t bf[NT][4];
#pragma unroll
            for (int j = 0; j < NT; ++j) {
                if constexpr (FP8) {
                    e4m3x4_to_bf16x2_scaled(h ? braw[j].z : braw[j].x, bf[j][0], bf[j][1]);
                    e4m3x4_to_bf16x2_scaled(h ? braw[j].w : braw[j].y, bf[j][2], bf[j][3]);
                } else {
                    const int r = warp_n * WNW + j * 8 + g, ch = 2 * q + h;
                    const uint4 v = *reinterpret_cast<const uint4*>(b_s + r * S::B_ROW + ((ch ^ (r & 1)) * 16));
                    bf[j][0] = v.x;
                    bf[j][1] = v.y;
                    bf[j][2] = v.z;
                    bf[j][3] = v.w;
                }
            }
#pragma unroll
            for (int mt = 0; mt < MT; ++mt) {
                const int r = warp_m * WM + mt * 16 + g, ch = 2 * q + h;
                const int sw = (ch ^ (r & 1)) * 16;  // (r + 8) & 1 == r & 1
                const uint4 x = *reinterpret_cast<const uint4*>(a_s + r * 128 + sw);
                const uint4 y = *reinterpret_cast<const uint4*>(a_s + (r + 8) * 128 + sw);
#pragma unroll
                for (int j = 0; j < NT; ++j) {
                    if constexpr (FP8) {
                        mma_16816_bf16(tmp[mt][j], x.x, y.x, x.y, y.y, bf[j][0], bf[j][1]);
                        mma_16816_bf16(tmp[mt][j], x.z, y.z, x.w, y.w, bf[j][2], bf[j][3]);
                    } else {
                        mma_16816_bf16(acc[mt][j], x.x, y.x, x.y, y.y, bf[j][0], bf[j][1]);
                        mma_16816_bf16(acc[mt][j], x.z, y.z, x.w, y.w, bf[j][2], bf[j][3]);
                    }
                }
            }
        }
        if constexpr (FP8) {
            if (promote) {
#pragma unroll
                for (int mt = 0; mt < MT; ++mt)
#pragma unroll
                    for (int j = 0; j < NT; ++j) {
                        const float sc = (GATE_UP && j >= NT / 2) ? s_b : s_a;
#pragma unroll
                        for (int r = 0; r < 4; ++r) {
                            acc[mt][j][r] = fmaf(tmp[mt][j][r], sc, acc[mt][j][r]);
                            tmp[mt][j][r] = 0.0f;
                        }
                    }
            }
        }
    }
    cp_async_wait<0>();  // nothing real is pending (tail groups are empty); keeps the exit clean

    // Epilogue. Accumulator (mt, j): rows warp_m·WM + mt·16 + g (+8), columns j·8 + 2q (+1).
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
        for (int rr = 0; rr < 2; ++rr) {
            const int m = warp_m * WM + mt * 16 + g + rr * 8;
            if (m >= rows) continue;
            if constexpr (GATE_UP) {
                __nv_bfloat16* out = p.h_out + size_t(row0 + m) * p.ldh + n0 + warp_n * (WNW / 2) + 2 * q;
#pragma unroll
                for (int j = 0; j < NT / 2; ++j) {
                    const float g0 = acc[mt][j][2 * rr], g1 = acc[mt][j][2 * rr + 1];
                    const float u0 = acc[mt][j + NT / 2][2 * rr], u1 = acc[mt][j + NT / 2][2 * rr + 1];
                    constexpr float hs = FP8 ? kFp8AScale : 1.0f;  // the down GEMM's A scaling
                    const float h0 = g0 / (1.0f + expf(-g0)) * u0 * hs;
                    const float h1 = g1 / (1.0f + expf(-g1)) * u1 * hs;
                    *reinterpret_cast<uint32_t*>(out + j * 8) = pack_bf16x2(h0, h1);
                }
            } else {
                const int dest = p.row_dest[row0 + m];
                float* out = p.y_out + size_t(dest) * p.H + n0 + warp_n * WNW + 2 * q;
#pragma unroll
                for (int j = 0; j < NT; ++j)
                    *reinterpret_cast<float2*>(out + j * 8) = make_float2(acc[mt][j][2 * rr], acc[mt][j][2 * rr + 1]);
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// 5. Combine
// ---------------------------------------------------------------------------------------------

struct CombineParams {
    const float* eout;               // [T·(k+1), H]
    const float* topk_w;             // [T, k]
    const float* shared_gate_logit;  // [T]
    int T, H, k;
    float* y;                        // [T, H]
};

__global__ __launch_bounds__(kCombineThreads) void moe_combine_kernel(CombineParams p) {
    const int t = blockIdx.x;
    const int h4 = p.H / 4;
    const float sg = 1.0f / (1.0f + expf(-p.shared_gate_logit[t]));
    const float4* shared = reinterpret_cast<const float4*>(p.eout + (size_t(p.T) * p.k + t) * p.H);
    float4* y = reinterpret_cast<float4*>(p.y + size_t(t) * p.H);
    for (int c = threadIdx.x; c < h4; c += kCombineThreads) {
        float4 acc = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        for (int j = 0; j < p.k; ++j) {
            const float w = p.topk_w[size_t(t) * p.k + j];
            const float4 v = reinterpret_cast<const float4*>(p.eout + (size_t(t) * p.k + j) * p.H)[c];
            acc.x += w * v.x;
            acc.y += w * v.y;
            acc.z += w * v.z;
            acc.w += w * v.w;
        }
        const float4 s = shared[c];
        acc.x += sg * s.x;
        acc.y += sg * s.y;
        acc.z += sg * s.z;
        acc.w += sg * s.w;
        y[c] = acc;
    }
}

// ---------------------------------------------------------------------------------------------
// Host side: the launch plan (parameters and grids of the five stages) is built by the same code
// for the GPU and for the CPU emulation (bench/kernels/moe_emu.cpp).
// ---------------------------------------------------------------------------------------------

struct MoePlan {
    int cfg = 0;  // 0: CfgS16, 1: CfgS32, 2: CfgL128, 3: CfgS16N
    bool fp8 = false;
    int route_vpl = 1;
    dim3 route_grid, gemm_up_grid, gemm_down_grid, combine_grid;
    RouteParams route{};
    SortParams sort{};
    GemmParams gate_up{}, down{};
    CombineParams combine{};
};

// Checks the shapes and picks the tile configuration (T > 0).
int check_and_choose_config(const MoeParams& p) {
    const MoeExpertTable& x = p.experts;
    QS_CHECK_MSG(x.E >= 1 && x.E <= 512, "launch_moe: 1 <= E <= 512");
    QS_CHECK_MSG(p.top_k >= 1 && p.top_k <= 32 && p.top_k <= x.E, "launch_moe: 1 <= top_k <= min(32, E)");
    QS_CHECK_MSG(x.H >= 128 && x.H % 128 == 0, "launch_moe: H must be a multiple of 128");
    QS_CHECK_MSG(x.I >= 64 && x.I % 64 == 0 && x.I_shared >= 64 && x.I_shared % 64 == 0,
                 "launch_moe: I and I_shared must be multiples of 64");
    QS_CHECK_MSG(x.format == DeviceWeightFormat::kBF16 || x.format == DeviceWeightFormat::kFP8Block,
                 "launch_moe: weight format");
    QS_CHECK(x.gate && x.up && x.down);
    QS_CHECK(x.format != DeviceWeightFormat::kFP8Block || (x.gate_scale && x.up_scale && x.down_scale));
    QS_CHECK(p.x && p.router_logits && p.shared_gate_logit && p.y && p.workspace);
    QS_CHECK_MSG(reinterpret_cast<uintptr_t>(p.workspace) % 256 == 0, "launch_moe: workspace must be 256-aligned");
    QS_CHECK_MSG(reinterpret_cast<uintptr_t>(p.x) % 16 == 0 && reinterpret_cast<uintptr_t>(p.y) % 16 == 0,
                 "launch_moe: x and y must be 16-byte aligned");
    QS_CHECK_MSG(int64_t(p.T) * (p.top_k + 1) * std::max<int64_t>(x.H, std::max(x.I, x.I_shared)) < (int64_t(1) << 31),
                 "launch_moe: T too large for 32-bit row indices");
    int cfg = p.tile_config;
    if (cfg < 0) {
        const double rows_per_expert = double(p.T) * p.top_k / x.E;
        cfg = rows_per_expert <= 0.125 ? 3 : rows_per_expert <= 10.0 ? 0 : rows_per_expert <= 40.0 ? 1 : 2;
    }
    QS_CHECK_MSG(cfg >= 0 && cfg <= 3, "launch_moe: tile_config");
    const int64_t bm = cfg == 1 ? 32 : cfg == 2 ? 128 : 16;
    QS_CHECK_MSG(max_tiles_for(bm, p.T, x.E, p.top_k) <= 65535, "launch_moe: too many tiles for grid.y");
    return cfg;
}

MoePlan make_plan(const MoeParams& p) {
    MoePlan pl;
    pl.cfg = check_and_choose_config(p);
    pl.fp8 = p.experts.format == DeviceWeightFormat::kFP8Block;
    const int bm = pl.cfg == 0 ? CfgS16::BM : pl.cfg == 1 ? CfgS32::BM : pl.cfg == 2 ? CfgL128::BM : CfgS16N::BM;
    const int bnw = pl.cfg == 0 ? CfgS16::BNW : pl.cfg == 1 ? CfgS32::BNW : pl.cfg == 2 ? CfgL128::BNW : CfgS16N::BNW;
    const MoeExpertTable& x = p.experts;
    const int T = p.T, E = x.E, H = x.H, k = p.top_k;
    const int imax = std::max(x.I, x.I_shared);
    const WsLayout L = ws_layout(T, H, x.I, x.I_shared, E, k);
    unsigned char* ws = static_cast<unsigned char*>(p.workspace);
    int* topk_id = reinterpret_cast<int*>(ws + L.topk_id);
    float* topk_w = reinterpret_cast<float*>(ws + L.topk_w);
    __nv_bfloat16* xb = reinterpret_cast<__nv_bfloat16*>(ws + L.xb);
    int* num_tiles = reinterpret_cast<int*>(ws + L.num_tiles);
    int4* work = reinterpret_cast<int4*>(ws + L.work);
    int* row_token = reinterpret_cast<int*>(ws + L.row_token);
    int* row_dest = reinterpret_cast<int*>(ws + L.row_dest);
    __nv_bfloat16* hbuf = reinterpret_cast<__nv_bfloat16*>(ws + L.hbuf);
    float* eout = reinterpret_cast<float*>(ws + L.eout);

    pl.route = RouteParams{p.x, p.router_logits, T, E, H, k, p.norm_topk_prob, topk_id, topk_w, xb,
                           pl.fp8 ? kFp8AScale : 1.0f};
    pl.route_grid = dim3((T + kRouteWarps - 1) / kRouteWarps);
    pl.route_vpl = E <= 32 ? 1 : E <= 64 ? 2 : E <= 128 ? 4 : E <= 256 ? 8 : 16;

    pl.sort = SortParams{topk_id, T, E, k, num_tiles, work, row_token, row_dest};

    const int max_tiles = int(max_tiles_for(bm, T, E, k));
    GemmParams& gu = pl.gate_up;
    gu.work = work;
    gu.num_tiles = num_tiles;
    gu.a = xb;
    gu.lda = H;
    gu.row_token = row_token;
    gu.w0 = x.gate;
    gu.w1 = x.up;
    gu.s0 = x.gate_scale;
    gu.s1 = x.up_scale;
    gu.E = E;
    gu.H = H;
    gu.I = x.I;
    gu.I_shared = x.I_shared;
    gu.h_out = hbuf;
    gu.ldh = imax;
    pl.gemm_up_grid = dim3(imax / (bnw / 2), max_tiles);

    GemmParams& dn = pl.down;
    dn.work = work;
    dn.num_tiles = num_tiles;
    dn.a = hbuf;
    dn.lda = imax;
    dn.row_dest = row_dest;
    dn.w0 = x.down;
    dn.s0 = x.down_scale;
    dn.E = E;
    dn.H = H;
    dn.I = x.I;
    dn.I_shared = x.I_shared;
    dn.y_out = eout;
    pl.gemm_down_grid = dim3(H / bnw, max_tiles);

    pl.combine = CombineParams{eout, topk_w, p.shared_gate_logit, T, H, k, p.y};
    pl.combine_grid = dim3(T);
    return pl;
}

#if defined(QS_MOE_EMULATE)
}  // namespace
#else

template <class Cfg, bool FP8, bool GATE_UP>
void launch_gemm(const GemmParams& gp, dim3 grid, cudaStream_t stream) {
    using S = GemmShape<Cfg, FP8>;
    static bool attr_set = false;  // the raised shared-memory limit is per kernel, set once
    if (!attr_set) {
        QS_CUDA_CHECK(cudaFuncSetAttribute(moe_gemm_kernel<Cfg, FP8, GATE_UP>,
                                           cudaFuncAttributeMaxDynamicSharedMemorySize, S::SMEM));
        attr_set = true;
    }
    moe_gemm_kernel<Cfg, FP8, GATE_UP><<<grid, S::NTHR, S::SMEM, stream>>>(gp);
    QS_CUDA_CHECK_LAUNCH();
}

void record(cudaEvent_t* ev, int i, cudaStream_t s) {
    if (ev) QS_CUDA_CHECK(cudaEventRecord(ev[i], s));
}

template <class Cfg>
void launch_sort_and_gemms(const MoePlan& pl, cudaStream_t stream, cudaEvent_t* ev) {
    moe_sort_kernel<Cfg::BM><<<1, kSortThreads, 0, stream>>>(pl.sort);
    QS_CUDA_CHECK_LAUNCH();
    record(ev, 2, stream);
    if (pl.fp8) launch_gemm<Cfg, true, true>(pl.gate_up, pl.gemm_up_grid, stream);
    else launch_gemm<Cfg, false, true>(pl.gate_up, pl.gemm_up_grid, stream);
    record(ev, 3, stream);
    if (pl.fp8) launch_gemm<Cfg, true, false>(pl.down, pl.gemm_down_grid, stream);
    else launch_gemm<Cfg, false, false>(pl.down, pl.gemm_down_grid, stream);
    record(ev, 4, stream);
}

void launch_impl(const MoeParams& p, cudaStream_t stream, cudaEvent_t* ev) {
    QS_CHECK(p.T >= 0);
    if (p.T == 0) {
        for (int i = 0; i < 6; ++i) record(ev, i, stream);
        return;
    }
    const MoePlan pl = make_plan(p);
    record(ev, 0, stream);
    const dim3 rb(kRouteWarps * 32);
    switch (pl.route_vpl) {
        case 1: moe_route_kernel<1><<<pl.route_grid, rb, 0, stream>>>(pl.route); break;
        case 2: moe_route_kernel<2><<<pl.route_grid, rb, 0, stream>>>(pl.route); break;
        case 4: moe_route_kernel<4><<<pl.route_grid, rb, 0, stream>>>(pl.route); break;
        case 8: moe_route_kernel<8><<<pl.route_grid, rb, 0, stream>>>(pl.route); break;
        default: moe_route_kernel<16><<<pl.route_grid, rb, 0, stream>>>(pl.route); break;
    }
    QS_CUDA_CHECK_LAUNCH();
    record(ev, 1, stream);
    if (pl.cfg == 0) launch_sort_and_gemms<CfgS16>(pl, stream, ev);
    else if (pl.cfg == 1) launch_sort_and_gemms<CfgS32>(pl, stream, ev);
    else if (pl.cfg == 2) launch_sort_and_gemms<CfgL128>(pl, stream, ev);
    else launch_sort_and_gemms<CfgS16N>(pl, stream, ev);
    moe_combine_kernel<<<pl.combine_grid, kCombineThreads, 0, stream>>>(pl.combine);
    QS_CUDA_CHECK_LAUNCH();
    record(ev, 5, stream);
}

}  // namespace

size_t moe_workspace_bytes(int64_t T, int64_t H, int64_t I, int64_t I_shared, int64_t E, int64_t top_k) {
    return ws_layout(T, H, I, I_shared, E, top_k).total;
}

void launch_moe(const MoeParams& p, cudaStream_t stream) { launch_impl(p, stream, nullptr); }

void launch_moe_profiled(const MoeParams& p, cudaStream_t stream, cudaEvent_t events[6]) {
    launch_impl(p, stream, events);
}

#endif  // !QS_MOE_EMULATE

}  // namespace qs::cuda

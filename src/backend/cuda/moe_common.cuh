// Shared pieces of the MoE kernels (moe_*.cu; public API and maths in moe_kernels.h): block sizes,
// the workspace layout, the FP8 operand scaling constants, every stage's parameter block, the tile
// configurations and the launch plan, and the per-stage launchers that moe_kernels.cu sequences.
// Included by .cu files only (and, through them, by the CPU emulation bench/kernels/moe_emu.cpp,
// which defines QS_MOE_EMULATE and drives the kernels itself); launches go to the caller's stream.
#pragma once

#include <algorithm>
#include <cuda_bf16.h>

#include "backend/cuda/moe_kernels.h"

namespace qs::cuda::moe {

constexpr int kRouteWarps = 8;
constexpr int kSortThreads = 1024;
constexpr int kCombineThreads = 256;
constexpr int kBK = 64;

// ---------------------------------------------------------------------------------------------
// Workspace layout
// ---------------------------------------------------------------------------------------------

// Reserved for the prefill path's grouped GEMMs (moe_cutlass_gemm.cu and moe_cutlass_launch.cuh
// check that they fit): per group a problem shape (12 B), six pointers and five 64-bit strides
// (100 B, ten arrays of 256-byte alignment); CUTLASS's workspace (tensor maps per SM).
constexpr size_t kGroupedArraysBytesPerGroup = 128;
constexpr size_t kGroupedGemmWorkspaceBytes = size_t(4) << 20;


inline int64_t max_tiles_for(int64_t bm, int64_t T, int64_t E, int64_t k) {
    const int64_t routed = T * k;
    const int64_t nonempty = std::min(E, routed);
    return (routed + nonempty * (bm - 1)) / bm + (T + bm - 1) / bm;
}

// The small-T path's expert list (moe_small.cu): n_slots, then slot_expert, slot_count
// [max_slots] and slot_dest [max_slots][T]. Slot 0 is the shared expert.
inline int64_t small_max_slots(int64_t T, int64_t E, int64_t k) { return std::min(E, T * k) + 1; }
inline int64_t small_plan_ints(int64_t T, int64_t E, int64_t k) {
    return 1 + small_max_slots(T, E, k) * (2 + T);
}

struct WsLayout {
    size_t topk_id, topk_w, xb, num_tiles, work, row_token, row_dest, hbuf, eout;
    // The prefill path's (moe_prefill.cu; it also uses hbuf for the fp8 h and eout for bf16 outputs).
    size_t expert_off, row_pos, a8, sfa, sfh, gu, grouped_arrays, grouped_gemm_ws;
    size_t small_plan;  // the small-T path's expert list (moe_small.cu; empty above kMoeSmallTMax)
    // The small-T path v2's router outputs [T, E] and [T], and its fallback block counter
    // (moe_small_route.cu; empty above kMoeSmallTMax).
    size_t small_logits, small_sg, small_counter;
    size_t total;
};

inline WsLayout ws_layout(int64_t T, int64_t H, int64_t I, int64_t I_shared, int64_t E, int64_t k) {
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
    L.expert_off = take(size_t(E + 2) * 4);
    L.row_pos = take(size_t(R) * 4);
    L.a8 = take(size_t(R * H) * 2);  // fp8, or bf16 for BF16 experts
    L.sfa = take(size_t(R * ((H + 127) / 128)) * 4);
    L.sfh = take(size_t(R * ((imax + 127) / 128)) * 4);
    L.gu = take(size_t(R * 2 * imax) * 2);
    L.grouped_arrays = take(kGroupedArraysBytesPerGroup * size_t(3 * (E + 1)) + 10 * 256);
    L.grouped_gemm_ws = take(kGroupedGemmWorkspaceBytes);
    L.small_plan = take(T <= kMoeSmallTMax ? size_t(small_plan_ints(T, E, k)) * 4 : 0);
    L.small_logits = take(T <= kMoeSmallTMax ? size_t(T * E) * 4 : 0);
    L.small_sg = take(T <= kMoeSmallTMax ? size_t(T) * 4 : 0);
    L.small_counter = take(T <= kMoeSmallTMax ? 4 : 0);
    L.total = off;
    return L;
}

// FP8 operand scaling. Four e4m3 bytes become two bf16x2 words holding value·2^-120 exactly by
// moving the sign, exponent and mantissa bits into place (3 integer instructions per pair; e4m3
// subnormals become bf16 subnormals, zeros stay zero). So that no product x·w·2^-120 comes near the
// fp32 subnormal range inside the MMA, the fp8 path stores its A operands (xb and h) times 2^64,
// and the 128-block promotion multiplies by scale_inv · 2^56: (x·2^64)(w·2^-120)·2^56 = x·w.
constexpr float kFp8AScale = 18446744073709551616.0f;  // 2^64
constexpr float kFp8Unscale = 72057594037927936.0f;    // 2^56

__device__ __forceinline__ uint32_t pack_bf16x2(float lo, float hi) {
    const __nv_bfloat162 b = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<const uint32_t*>(&b);
}

// Stage parameters (moe_route.cu, moe_gemm.cu, moe_combine.cu).
struct RouteParams {
    const float* x;              // [T, H]
    const float* router_logits;  // [T, E]
    int T, E, H, k;
    bool norm_topk_prob;
    int* topk_id;                // [T, k]
    float* topk_w;               // [T, k]
    __nv_bfloat16* xb;           // [T, H] = bf16(x · x_scale); null: not written (prefill path)
    float x_scale;               // 1, or kFp8AScale for fp8 weights
};

struct SortParams {
    const int* topk_id;  // [T, k]
    int T, E, k;
    int* num_tiles;      // [1]
    int4* work;          // [max_tiles] {expert, first sorted row, rows, 0}
    int* row_token;      // [T·(k+1)]
    int* row_dest;       // [T·(k+1)]
    int* expert_off = nullptr;  // optional [E + 2]: first sorted row of expert e; [E + 1] = T·(k+1)
    int* row_pos = nullptr;     // optional [T·(k+1)]: inverse of row_dest (sorted row of pair i)
};

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
    __nv_bfloat16* y_out16 = nullptr;  // decode v2's / INT4's down, set: eout in bf16 (MoeParams::decode_eout_bf16)
    // INT4 experts (MoePlan::int4, moe_decode_gemm_int4.cu): codes and bf16 scales of w0 / w1
    // (MoeExpertTable's INT4 arrays), scale group (a multiple of kBK).
    const uint32_t* const* q0 = nullptr;
    const uint32_t* const* q1 = nullptr;
    const void* const* qs0 = nullptr;  // MoeExpertTable::gate_qs's storage
    const void* const* qs1 = nullptr;
    int qgroup = 0;
    // NVFP4 experts in those arrays (MoeExpertTable::nvfp4: E2M1 codes, qgroup 16): the matrices'
    // fp32 global multipliers [3 (E + 1)] (gate, up, down of expert e at 3e, 3e + 1, 3e + 2); null: INT4.
    const float* qglobal = nullptr;
};

// The work of a grouped-GEMM block of BNW weight rows (moe_gemm.cu, moe_decode_gemm.cu,
// moe_decode_gemm_int4.cu): tile blockIdx.y of p.work is expert e (p.E: the shared expert, I_shared
// wide) over sorted rows row0 .. row0 + rows - 1; the block's first weight row n0 (gate_up: BNW / 2
// intermediate rows, their gate and up rows) and the GEMM's K. False when the block has nothing to
// do: a tile past *p.num_tiles, or gate_up rows past the expert's intermediate size.
struct TileWork {
    int e, row0, rows, Ie, n0, K;
};
template <bool GATE_UP>
__device__ __forceinline__ bool tile_work(const GemmParams& p, int BNW, TileWork& w) {
    const int tile = blockIdx.y;
    if (tile >= *p.num_tiles) return false;
    const int4 wk = p.work[tile];
    w.e = wk.x, w.row0 = wk.y, w.rows = wk.z;
    w.Ie = w.e == p.E ? p.I_shared : p.I;
    if constexpr (GATE_UP) {
        w.n0 = blockIdx.x * (BNW / 2);
        w.K = p.H;
        return w.n0 < w.Ie;
    } else {
        w.n0 = blockIdx.x * BNW;
        w.K = w.Ie;
        return true;
    }
}

// The decode grouped GEMMs' down epilogue (moe_decode_gemm.cu, moe_decode_gemm_int4.cu): the output
// rows of lane q's tokens 8·n + 2q + u of the tile (rows past it: 0), loaded before the K loop so
// that no epilogue store waits on a dependent global load (bench/kernels/NOTES.md "Session 36").
template <int NG>
__device__ __forceinline__ void tile_row_dests(const GemmParams& p, int row0, int rows, int q, int (&dest)[NG][2]) {
#pragma unroll
    for (int n = 0; n < NG; ++n)
#pragma unroll
        for (int u = 0; u < 2; ++u) {
            const int m = n * 8 + 2 * q + u;
            dest[n][u] = m < rows ? p.row_dest[row0 + m] : 0;
        }
}

// An expert's output as the combine takes it: rounded to bf16 (round to nearest even) when bf16 is
// set (MoeParams::decode_eout_bf16 on the small-T path: the rounding point of the grouped GEMMs' bf16
// eout and of the prefill path), else as computed. The same value at every T then, up to the
// products' summation order.
__device__ __forceinline__ float expert_out(float v, int bf16) {
    return bf16 ? __bfloat162float(__float2bfloat16_rn(v)) : v;
}

// The swapped-operand decode GEMMs' epilogue (moe_decode_gemm.cu, moe_decode_gemm_int4.cu):
// accumulator element r of (mt, n) is weight row 16·mt + g + 8·(r >> 1) of the warp's 32-row slice,
// token 8·n + 2q + (r & 1) of the tile. gate_up (fragment 0 gate, 1 up): h = silu(g)·u·hs rounded to
// bf16 into h_out; down: the expert outputs into their rows dest (tile_row_dests), fp32 or, with
// y_out16 (MoeParams::decode_eout_bf16), rounded to bf16.
template <bool GATE_UP, int NG>
__device__ __forceinline__ void swapped_tile_epilogue(const GemmParams& p, const float (&acc)[2][NG][4], int row0, int rows,
                                                      int n0, int warp, int g, int q, const int (&dest)[NG][2], float hs) {
#pragma unroll
    for (int n = 0; n < NG; ++n) {
#pragma unroll
        for (int r = 0; r < 4; ++r) {
            const int m = n * 8 + 2 * q + (r & 1);
            if (m >= rows) continue;
            const int wr = g + 8 * (r >> 1);
            if constexpr (GATE_UP) {
                const float gv = acc[0][n][r], uv = acc[1][n][r];
                const float hv = gv / (1.0f + expf(-gv)) * uv * hs;
                p.h_out[size_t(row0 + m) * p.ldh + n0 + warp * 16 + wr] = __float2bfloat16_rn(hv);
            } else {
                const size_t o = size_t(dest[n][r & 1]) * p.H + n0 + warp * 32 + wr;
                if (p.y_out16 != nullptr) {  // uniform
                    p.y_out16[o] = __float2bfloat16_rn(acc[0][n][r]);
                    p.y_out16[o + 16] = __float2bfloat16_rn(acc[1][n][r]);
                } else {
                    p.y_out[o] = acc[0][n][r];
                    p.y_out[o + 16] = acc[1][n][r];
                }
            }
        }
    }
}

// Row m of a grouped-GEMM tile's A operand (the tile's sorted rows row0 .. row0 + rows - 1): gate_up
// gathers token rows of xb through row_token, down reads hbuf's sorted rows. Rows past the tile read
// the tile's first row (the copies zero-fill them: 0 bytes).
template <bool GATE_UP>
__device__ __forceinline__ const __nv_bfloat16* tile_a_row(const GemmParams& p, int row0, int m, int rows) {
    const int r = row0 + (m < rows ? m : 0);
    return p.a + size_t(GATE_UP ? p.row_token[r] : r) * p.lda;
}

// The INT4 grouped GEMMs' block (moe_decode_gemm_int4.cu): CfgS32's tiles (32 tokens × 128
// weight rows, 4 warps), 32-byte weight rows per 64-wide K stage, 8 stages.
struct Int4GemmShape {
    static constexpr int BM = CfgS32::BM, BNW = CfgS32::BNW, NTHR = CfgS32::WARPS_N * 32;
    static constexpr int STAGES = 8;
    static constexpr int A_STAGE = BM * kBK * 2;
    static constexpr int B_ROW = kBK / 2;
    static constexpr int B_STAGE = BNW * B_ROW;
    static constexpr int SMEM = STAGES * (A_STAGE + B_STAGE);
    // NVFP4 (GemmParams::qglobal): after the ring, each stage's block scales: a row's four E4M3
    // scale bytes of one 64-wide K stage (4 bytes, one cp.async), 128 rows.
    static constexpr int S_ROW = 4;
    static constexpr int S_STAGE = BNW * S_ROW;
    static constexpr int SMEM_NVFP4 = SMEM + STAGES * S_STAGE;
};

// 128-wide K blocks of fp8 scales a grouped-GEMM block keeps in shared memory (K <= 4,096;
// launch_moe checks H, I and I_shared against it).
constexpr int kMaxScaleBlocks = 32;

template <class Cfg, bool FP8>
struct GemmShape {
    static constexpr int NTHR = Cfg::WARPS_M * Cfg::WARPS_N * 32;
    static constexpr int STAGES = FP8 ? Cfg::STAGES_FP8 : Cfg::STAGES_BF16;
    static constexpr int A_STAGE = Cfg::BM * kBK * 2;
    static constexpr int B_ROW = FP8 ? kBK : kBK * 2;
    static constexpr int B_STAGE = Cfg::BNW * B_ROW;
    static constexpr int RING = STAGES * (A_STAGE + B_STAGE);
    // fp8: after the ring, the block's scale_inv · 2^56 per K block, w0's then w1's
    // ([2][kMaxScaleBlocks] floats), read once before the K loop (load_block_scales): a scale
    // loaded from global memory inside the loop stalled every warp for a memory latency per
    // K block (ncu, session 21: 11 % of the fp8 gate_up kernel's stall samples on that one use).
    static constexpr int SCALES = FP8 ? 2 * kMaxScaleBlocks * 4 : 0;
    static constexpr int SMEM = RING + SCALES;
};

// The fp8 GEMMs' scales of this block's 128 weight rows (row block sc_row of w0's and w1's
// [ceil(N / 128), ceil(K / 128)] scale_inv arrays), times kFp8Unscale, into s_sc[2][kMaxScaleBlocks]
// (w1 null: w0's only). Plain loads: issued after the pipeline prologue, their latency overlaps
// the first stages'; the first K stage's barrier publishes them.
__device__ __forceinline__ void load_block_scales(float* s_sc, const float* sc0, const float* sc1, int sc_row,
                                                  int K, int tid, int nthr) {
    const int nb = (K + 127) / 128;
    const int n = sc1 ? 2 * nb : nb;
    for (int i = tid; i < n; i += nthr) {
        const int m = i >= nb, b = m ? i - nb : i;
        s_sc[m * kMaxScaleBlocks + b] = (m ? sc1 : sc0)[sc_row * nb + b] * kFp8Unscale;
    }
}

struct CombineParams {
    const float* eout;               // [T·(k+1), H]
    const float* topk_w;             // [T, k]
    const float* shared_gate_logit;  // [T]
    int T, H, k;
    float* y;                        // [T, H]
    const __nv_bfloat16* eout16 = nullptr;  // set: eout in bf16 instead (MoeParams::decode_eout_bf16)
};

// The small-T path (moe_small.cu): blocks of kSmallThreads; gate_up blocks take kSmallRows
// intermediate rows (gate and up rows each) of one expert for all its tokens; down blocks take
// kSmallCols output columns of one token over all its experts.
constexpr int kSmallThreads = 256;
constexpr int kSmallRows = 16;
constexpr int kSmallCols = 8;

// Floats of one token's x row in the gate_up kernel's shared memory: 16-value chunks padded to 20
// (fp8) or 8-value chunks padded to 10 (bf16), so 1.25·H either way (moe_small.cu: SmallX).
inline int small_x_row_floats(int H) { return H / 16 * 20; }

// The small-T down kernel version 2's shared memory (moe_small_down_slots.cu), byte offsets set by
// make_small_plan. kDownSlotsRing: slots of each lane's cp.async ring (kDownSlotsRing - 1 in flight).
constexpr int kDownSlotsRing = 8;
struct DownSlotsLayout {
    int max_slots = 0;  // small_max_slots(T, E, k)
    int cpl = 1;        // 16-byte chunks of a down row per lane: 1 or 2 (max(I, I_shared) <= 32·2 chunks)
    int kb = 1;         // FP8 scale blocks of a down row: ceil(max(I, I_shared) / 128)
    int off_expert = 0, off_count = 0, off_dest = 0, off_wptr = 0, off_sptr = 0, off_scale = 0, off_topw = 0,
        off_sg = 0, off_dots = 0, off_h = 0, off_ring = 0;
    int bytes = 0;  // dynamic shared memory of a block
};

struct SmallParams {
    const float* x;                  // [T, H]
    const float* router_logits;      // [T, E] (v2: = logits_out)
    const float* shared_gate_logit;  // [T] (v2: = sg_out)
    // v2 (moe_small_route.cu): router [E, H] and shared-expert gate [H] weights (fp32), where the
    // router kernel writes the logits, and the block counter (0 on entry, left 0).
    const float* router_w;
    const float* sgate_w;
    float* logits_out;
    float* sg_out;
    int* counter;
    const void* const* gate;         // MoeExpertTable's arrays
    const void* const* up;
    const void* const* down;
    const float* const* gate_scale;
    const float* const* up_scale;
    const float* const* down_scale;
    // INT4 experts (SmallPlan::int4; moe_small_int4.cu): MoeExpertTable's INT4 arrays and group.
    const uint32_t* const* gate_q;
    const uint32_t* const* up_q;
    const uint32_t* const* down_q;
    const void* const* gate_qs;  // MoeExpertTable::gate_qs's storage
    const void* const* up_qs;
    const void* const* down_qs;
    int qgroup;
    // NVFP4 experts in those arrays (SmallPlan::nvfp4; CudaOptions::nvfp4_kernels): E2M1 codes, qgroup
    // 16, and the matrices' fp32 global multipliers [3 (E + 1)] (gate, up, down of expert e at 3e,
    // 3e + 1, 3e + 2), applied to each dot product once.
    const float* qglobal;
    int T, E, H, I, I_shared, k;
    bool norm_topk_prob;
    int* topk_id;                    // [T, k]
    float* topk_w;                   // [T, k]
    int* n_slots;                    // [1]: distinct routed experts + 1
    int* slot_expert;                // [max_slots]: slot 0 = E (shared), then routed experts in pair order
    int* slot_count;                 // [max_slots]: tokens of the slot
    int* slot_dest;                  // [max_slots][T]: h row of each (slot, token): t·k+j, or T·k+t (shared)
    __nv_bfloat16* h;                // [T·(k+1), ldh] silu(g)·u (× kFp8AScale for fp8), bf16
    int ldh;
    float* y;                        // [T, H]
    int down_h_smem;                 // 1: the down kernel stages its token's k + 1 h rows in shared
                                     // memory (SmallPlan::down_smem bytes), 0: reads them from h
    int prefetch_down;               // MoeParams::small_prefetch_down
    int eout_bf16;                   // MoeParams::decode_eout_bf16: each expert's output rounded to bf16
                                     // before the combine (expert_out), as the grouped paths store it
    DownSlotsLayout down_slots;      // SmallPlan::down_version 2
};

// The launch plan (parameters and grids of the five stages), built by the same code
// (moe_kernels.cu) for the GPU and for the CPU emulation.
struct MoePlan {
    int cfg = 0;  // 0: CfgS16, 1: CfgS32, 2: CfgL128, 3: CfgS16N
    bool fp8 = false;
    bool decode_v2 = false;  // MoeParams::decode_version 2: cfg 1's tiles, moe_decode_gemm.cu's GEMMs
    bool down_pdl = false;   // decode_v2 or int4: down launched with programmatic dependent launch (MoeParams::decode_pdl)
    bool int4 = false;       // MoeParams::int4_grouped taken: cfg 1's tiles, moe_decode_gemm_int4.cu's GEMMs
    int route_vpl = 1;
    dim3 route_grid, gemm_up_grid, gemm_down_grid, combine_grid;
    RouteParams route{};
    SortParams sort{};
    GemmParams gate_up{}, down{};
    CombineParams combine{};
};

// The small-T path's plan: one route block, then gate_up (x = row slices of max(I, I_shared),
// y = expert slots) and down+combine (x = tokens, y = H / kSmallCols column slices).
struct SmallPlan {
    bool fp8 = false;
    bool int4 = false;        // INT4 experts: gate_up and down are moe_small_int4.cu's
    bool nvfp4 = false;       // with int4: the arrays hold NVFP4 (moe_small_int4.cu's Code4::kNvfp4 kernels)
    int version = 1;          // MoeParams::small_version
    bool zero_counter = false; // v2 without MoeParams::small_counter: memset the workspace's first
    int router_blocks = 1;    // v2: blocks of the router GEMV (one of its E + 1 rows each)
    int route_vpl = 1;
    int nmax = 1;             // token bucket of T (1, 2, 4, 8): the gate_up instantiation
    size_t gate_up_smem = 0;  // x of up to nmax tokens, fp32 (gate_up_mma: bf16, small_int4_gate_up_mma_smem)
    bool gate_up_mma = false; // INT4 experts' gate_up on tensor cores (MoeParams::small_int4_gate_up_version 2,
                              // the shapes small_int4_gate_up_mma_fits; moe_small_int4_gate_up_mma.cu)
    size_t down_smem = 0;     // a token's k + 1 h rows, bf16 (p.down_h_smem), or 0
    int down_version = 1;     // MoeParams::small_down_version where the shapes allow 2 (p.down_slots), else 1
    dim3 gate_up_grid, down_grid;
    SmallParams p{};
};

MoePlan make_plan(const MoeParams& p);
// The INT4 gate_up on tensor cores (moe_small_int4_gate_up_mma.cu): whether these experts fit it
// (INT4 with a group multiple of 128, or NVFP4; H a multiple of 128 up to 4,096), and its shared memory.
bool small_int4_gate_up_mma_fits(const MoeExpertTable& x);
size_t small_int4_gate_up_mma_smem(int nmax, int H);
// Whether MoeParams::int4_grouped sends this call to moe_decode_gemm_int4.cu (checked there).
bool int4_grouped_chosen(const MoeParams& p);
bool small_path_chosen(const MoeParams& p);
SmallPlan make_small_plan(const MoeParams& p);

#if !defined(QS_MOE_EMULATE)
// Per-stage launchers; Cfg is one of CfgS16, CfgS32, CfgL128, CfgS16N.
void launch_route(const MoePlan& pl, cudaStream_t stream);                        // moe_route.cu
template <class Cfg>
void launch_sort(const MoePlan& pl, cudaStream_t stream);                         // moe_route.cu
template <class Cfg, bool FP8, bool GATE_UP>
void launch_gemm(const GemmParams& gp, dim3 grid, cudaStream_t stream);           // moe_gemm.cu
void launch_combine(const MoePlan& pl, cudaStream_t stream);                      // moe_combine.cu
template <bool FP8, bool GATE_UP>
void launch_decode_gemm(const GemmParams& gp, dim3 grid, cudaStream_t stream, bool pdl);    // moe_decode_gemm.cu
template <bool GATE_UP>
void launch_int4_gemm(const GemmParams& gp, dim3 grid, cudaStream_t stream, bool pdl);  // moe_decode_gemm_int4.cu
// The small-T path (moe_small.cu); `ev` (optional, the lab's) gets events 1..5 as launch_moe_profiled.
void launch_small(const SmallPlan& pl, cudaStream_t stream, cudaEvent_t* ev);
// Its first launch (moe_small_route.cu): v1 the route kernel, v2 the router GEMV + route kernel
// (after a memset of the workspace counter when zero_counter).
void launch_small_route(const SmallPlan& pl, cudaStream_t stream);
// Down + combine version 2 (moe_small_down_slots.cu; SmallPlan::down_version 2).
void launch_small_down_slots(const SmallPlan& pl, cudaStream_t stream);
// The INT4 gate_up on tensor cores (SmallPlan::gate_up_mma; moe_small_int4_gate_up_mma.cu).
void launch_small_int4_gate_up_mma(const SmallPlan& pl, cudaStream_t stream);
// The INT4 experts' gate_up and down (moe_small_int4.cu; event 3 between them when ev is set).
void launch_small_int4_stages(const SmallPlan& pl, cudaStream_t stream, cudaEvent_t* ev);
#endif

}  // namespace qs::cuda::moe

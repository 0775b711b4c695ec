// MoE small-T path (T <= kMoeSmallTMax tokens: decode and MTP verify steps). Maths in
// moe_kernels.h; CPU reference: src/backend/cpu/cpu_moe.cpp. Three launches, no sort:
//  1. routing + the list of distinct experts (moe_small_route.cu): v1 from the caller's router
//                              logits; v2 (SmallPlan::version) also computes the router GEMV and
//                              the shared-expert-gate logit. Slot 0 = the shared expert (all T
//                              tokens, h rows T·k + t), slot s >= 1 = the s-th distinct routed
//                              expert with its tokens in token order (h rows t·k + j); n_slots.
//  2. moe_small_gate_up_kernel grid (max(I, I_shared) / kSmallRows, max slots); a block = kSmallRows
//                              intermediate rows of one slot's expert for all the slot's tokens:
//                              x rows of those tokens → shared memory (fp32 of the bf16-rounded x,
//                              × kFp8AScale for fp8, as the other paths' A operand); warp w takes
//                              rows n0 + 2w, n0 + 2w + 1 (gate and up), lanes stride over 16-byte
//                              weight chunks (each weight byte read once per block), fp32 FMAs;
//                              h = bf16(silu(g)·u (× kFp8AScale)) → h[dest row] (the other paths'
//                              rounding point). Slots past n_slots and rows past I_e exit at once.
//  3. moe_small_down_kernel    grid (T, H / kSmallCols); warp w = output column c0 + w of token t:
//                              d_j = down_{e_j}[c, :] · h[t·k + j] for j < k and the shared expert
//                              (all k + 1 weight loads in flight at once, h from shared memory),
//                              then y = Σ_j w_j·d_j (j order) + σ(sg_t)·d_shared, as moe_combine.cu
//                              sums; each y element written once, no atomics, bitwise deterministic.
// FP8 weights (e4m3, 128×128 block scale_inv): bytes become fp32 value·2^-120 exactly (bit moves);
// each lane's 16-value chunk lies inside one 128-wide K block, its partial dot is multiplied by
// scale_inv·kFp8Unscale (x and h carry kFp8AScale, see moe_common.cuh). A block's 16 rows
// (kSmallRows) and a warp's column lie inside one 128-row scale block.
// v2 launches 2 and 3 with programmatic dependent launch: gate_up's slot-0 blocks (the shared
// expert, known without routing) run while the router kernel does; down issues its first weight
// loads before it waits for gate_up's h (bench/kernels/NOTES.md, "Small-T v2").
// Launch shapes depend on T and the shapes only (CUDA-graph capturable); the host never learns the
// routing. Also compiles as host C++ for the CPU emulation (bench/kernels/moe_emu.cpp).
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/device_limits.h"
#include "backend/cuda/moe_common.cuh"
#if !defined(QS_MOE_EMULATE)
#include "backend/cuda/ptx_helpers.cuh"  // the emulation shim defines qs::cuda::ptx itself
#endif
#include "backend/cuda/moe_small_math.cuh"

namespace qs::cuda::moe {
namespace {

using namespace small_math;

constexpr int kSmallWarps = kSmallThreads / 32;
constexpr int kSmallRowsPerWarp = kSmallRows / kSmallWarps;  // intermediate rows (gate + up each)
static_assert(kSmallRows % kSmallWarps == 0 && kSmallCols == kSmallWarps, "small-T tiling");
constexpr int kDownGroup = 9;  // dots whose weight loads are in flight together (all k + 1 = 9 of the real model)

__device__ __forceinline__ int token_of_dest(const SmallParams& p, int dest) {
    return dest < p.T * p.k ? dest / p.k : dest - p.T * p.k;
}

// Tokens a gate_up block computes for: the slot's count rounded up to 1, 2, 4 or 8.
__device__ __forceinline__ int token_bucket(int n) { return n <= 1 ? 1 : n <= 2 ? 2 : n <= 4 ? 4 : 8; }

// ---------------------------------------------------------------------------------------------
// 2. gate_up with SiLU·mul
// ---------------------------------------------------------------------------------------------

// Shared-memory x rows: 16-byte weight chunk c covers VPC x values, stored at c·(VPC + PAD) so
// that the lanes' float4 (fp8) / float2 (bf16) reads of consecutive chunks hit distinct banks.
template <bool FP8>
struct SmallX {
    static constexpr int VPC = FP8 ? 16 : 8;  // values per 16-byte weight chunk
    static constexpr int PAD = FP8 ? 4 : 2;
    static constexpr int row(int H) { return H / VPC * (VPC + PAD); }
};

static_assert(SmallX<true>::row(2048) == 2560 && SmallX<false>::row(2048) == 2560,
              "small_x_row_floats (moe_common.cuh) sizes the shared memory for both formats");

// h row of token n of a slot: slot 0 (the shared expert) is T·k + n without reading the plan (v2
// runs those blocks before the router has written it).
__device__ __forceinline__ int slot_dest_of(const SmallParams& p, int slot, int n) {
    return slot == 0 ? p.T * p.k + n : p.slot_dest[slot * p.T + n];
}

// The slot's x rows → shared memory (nb rows; rows past nt are zeros).
template <bool FP8>
__device__ __forceinline__ void stage_x(const SmallParams& p, float* xs, int slot, int nt, int nb) {
    using X = SmallX<FP8>;
    const int H = p.H, xrow = X::row(H), h2 = H / 2;
    const float sc = FP8 ? kFp8AScale : 1.0f;
    for (int n = 0; n < nb; ++n) {
        const float2* src = nullptr;
        if (n < nt) src = reinterpret_cast<const float2*>(p.x + size_t(token_of_dest(p, slot_dest_of(p, slot, n))) * H);
        for (int c = threadIdx.x; c < h2; c += kSmallThreads) {
            float2 v = make_float2(0.0f, 0.0f);  // tokens past nt: zeros (computed, never stored)
            if (src != nullptr) {
                const float2 f = src[c];
                v = make_float2(bf16_round(f.x * sc), bf16_round(f.y * sc));
            }
            const int col = 2 * c;
            *reinterpret_cast<float2*>(xs + n * xrow + col / X::VPC * (X::VPC + X::PAD) + col % X::VPC) = v;
        }
    }
}

// Stages x (nb rows) and computes the block's rows. V2: the first step's weight loads are issued
// before x is staged, and a step is 4 chunks per lane for N <= 2 (one step covers a 2048-wide fp8
// row: 16 loads of 16 bytes in flight per lane) unless the kernel also holds the 8-token path (NMAX
// 8: 128 registers, it would spill); the FMAs run in the same chunk order either way, so v1 and v2
// give bit-identical h.
template <bool FP8, int N, bool V2, int NMAX>
__device__ __forceinline__ void small_gate_up_rows(const SmallParams& p, float* xs, int slot, int e, int nt, int nb,
                                                   int n0) {
    using X = SmallX<FP8>;
    constexpr int VPC = X::VPC, RPW = kSmallRowsPerWarp, NR = 2 * RPW;
    constexpr int US = V2 && N <= 2 && NMAX <= 4 ? 4 : 2;  // chunks per lane per step
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int r0 = n0 + warp * RPW;
    const int H = p.H, xrow = X::row(H), nch = H / VPC;
    const size_t row_bytes = size_t(H) * (FP8 ? 1 : 2);
    const unsigned char* wrow[NR];
#pragma unroll
    for (int i = 0; i < NR; ++i)
        wrow[i] = static_cast<const unsigned char*>(i < RPW ? p.gate[e] : p.up[e]) + size_t(r0 + i % RPW) * row_bytes;
    const float* sgate = nullptr;
    const float* sup = nullptr;
    if constexpr (FP8) {
        const int kb = (H + 127) / 128;
        sgate = p.gate_scale[e] + (r0 / 128) * kb;
        sup = p.up_scale[e] + (r0 / 128) * kb;
    }

    float acc[NR][N];
#pragma unroll
    for (int i = 0; i < NR; ++i)
#pragma unroll
        for (int n = 0; n < N; ++n) acc[i][n] = 0.0f;

    uint4 w[US][NR];  // US·NR loads in flight per lane
    auto load_step = [&](int c0) {
#pragma unroll
        for (int u = 0; u < US; ++u) {
            const int c = c0 + 32 * u + lane;
#pragma unroll
            for (int i = 0; i < NR; ++i) w[u][i] = c < nch ? load16(wrow[i] + size_t(c) * 16) : make_uint4(0, 0, 0, 0);
        }
    };
    if constexpr (V2) load_step(0);
    stage_x<FP8>(p, xs, slot, nt, nb);
    __syncthreads();

    for (int c0 = 0; c0 < nch; c0 += 32 * US) {
        if constexpr (!V2) load_step(c0);
#pragma unroll
        for (int u = 0; u < US; ++u) {
            const int c = c0 + 32 * u + lane;
            if (c >= nch) continue;
            const float* xc = xs + c * (VPC + X::PAD);
            float part[NR][N];
#pragma unroll
            for (int i = 0; i < NR; ++i)
#pragma unroll
                for (int n = 0; n < N; ++n) part[i][n] = 0.0f;
#pragma unroll
            for (int q = 0; q < 4; ++q) {
                if constexpr (FP8) {
                    float wf[NR][4];
#pragma unroll
                    for (int i = 0; i < NR; ++i) e4m3x4_to_f32_scaled(word(w[u][i], q), wf[i]);
#pragma unroll
                    for (int n = 0; n < N; ++n) {
                        const float4 xv = *reinterpret_cast<const float4*>(xc + n * xrow + 4 * q);
#pragma unroll
                        for (int i = 0; i < NR; ++i) {
                            float s = part[i][n];
                            s = fmaf(wf[i][0], xv.x, s);
                            s = fmaf(wf[i][1], xv.y, s);
                            s = fmaf(wf[i][2], xv.z, s);
                            s = fmaf(wf[i][3], xv.w, s);
                            part[i][n] = s;
                        }
                    }
                } else {
                    float wf[NR][2];
#pragma unroll
                    for (int i = 0; i < NR; ++i) bf16x2_to_f32(word(w[u][i], q), wf[i][0], wf[i][1]);
#pragma unroll
                    for (int n = 0; n < N; ++n) {
                        const float2 xv = *reinterpret_cast<const float2*>(xc + n * xrow + 2 * q);
#pragma unroll
                        for (int i = 0; i < NR; ++i) {
                            part[i][n] = fmaf(wf[i][0], xv.x, part[i][n]);
                            part[i][n] = fmaf(wf[i][1], xv.y, part[i][n]);
                        }
                    }
                }
            }
            if constexpr (FP8) {
                const int kblk = c * VPC / 128;
                const float sg = sgate[kblk] * kFp8Unscale, su = sup[kblk] * kFp8Unscale;
#pragma unroll
                for (int i = 0; i < NR; ++i)
#pragma unroll
                    for (int n = 0; n < N; ++n) acc[i][n] = fmaf(part[i][n], i < RPW ? sg : su, acc[i][n]);
            } else {
#pragma unroll
                for (int i = 0; i < NR; ++i)
#pragma unroll
                    for (int n = 0; n < N; ++n) acc[i][n] += part[i][n];
            }
        }
        if constexpr (V2) {
            if (c0 + 32 * US < nch) load_step(c0 + 32 * US);
        }
    }
#pragma unroll
    for (int i = 0; i < NR; ++i)
#pragma unroll
        for (int n = 0; n < N; ++n)
#pragma unroll
            for (int o = 16; o > 0; o >>= 1) acc[i][n] += __shfl_xor_sync(0xffffffffu, acc[i][n], o);

    // Lane i·N + n writes h of row r0 + i, token n (every lane holds every sum).
#pragma unroll
    for (int i = 0; i < RPW; ++i) {
#pragma unroll
        for (int n = 0; n < N; ++n) {
            if (lane != i * N + n || n >= nt) continue;
            const float g = acc[i][n], u = acc[RPW + i][n];
            constexpr float hs = FP8 ? kFp8AScale : 1.0f;  // the down kernel's h scaling
            const float h = g / (1.0f + expf(-g)) * u * hs;
            const int dest = slot_dest_of(p, slot, n);
            p.h[size_t(dest) * p.ldh + r0 + i] = __float2bfloat16_rn(h);
        }
    }
}

// MoeParams::small_prefetch_down: gate_up block x of a slot asks L2 for the x-th of gate_up's
// blocks' shares of expert e's down matrix [H, Ie] (128-byte lines; block 0 also its FP8 scales).
// Down can start only once gate_up's blocks retire (registers), so without it down's first weight
// loads come from DRAM after gate_up ends; the bytes read from DRAM are the same, only earlier.
template <bool FP8>
__device__ __forceinline__ void prefetch_down_share(const SmallParams& p, int e, int Ie) {
    const int nblocks = (Ie + kSmallRows - 1) / kSmallRows;  // the slot's active gate_up blocks
    const int64_t lines = (int64_t(p.H) * Ie * (FP8 ? 1 : 2) + 127) / 128;
    const int64_t per = (lines + nblocks - 1) / nblocks;
    const int64_t l0 = int64_t(blockIdx.x) * per, l1 = l0 + per < lines ? l0 + per : lines;
    const unsigned char* base = static_cast<const unsigned char*>(p.down[e]);
    for (int64_t l = l0 + threadIdx.x; l < l1; l += kSmallThreads) ptx::prefetch_l2(base + l * 128);
    if constexpr (FP8) {
        const int scales = (p.H + 127) / 128 * ((Ie + 127) / 128);
        if (blockIdx.x == 0)
            for (int i = threadIdx.x * 32; i < scales; i += kSmallThreads * 32) ptx::prefetch_l2(p.down_scale[e] + i);
    }
}

// NMAX = token_bucket(T): the largest bucket a slot can need (the shared expert's slot has T tokens);
// instantiated per bucket so that T = 1 does not pay the registers of the 8-token accumulators.
// V2 (launched with programmatic dependent launch after the router kernel): the shared expert's
// blocks (slot 0) read nothing the router writes and start at once; the others wait for it.
template <bool FP8, int NMAX, bool V2>
__global__ __launch_bounds__(kSmallThreads, 2) void moe_small_gate_up_kernel(SmallParams p) {
    const int slot = blockIdx.y;
    int e = p.E, nt = p.T;  // slot 0: the shared expert, every token
    if constexpr (V2) {
        if (slot != 0) ptx::griddep_wait();
        ptx::griddep_launch_dependents();  // down starts once every block got here (after the router)
    }
    if (slot != 0) {
        if (slot >= *p.n_slots) return;
        e = p.slot_expert[slot];
        nt = p.slot_count[slot];
    }
    const int Ie = e == p.E ? p.I_shared : p.I;
    const int n0 = blockIdx.x * kSmallRows;
    if (n0 >= Ie) return;
    if (p.prefetch_down) prefetch_down_share<FP8>(p, e, Ie);
    const int nb = token_bucket(nt);
    float* xs = reinterpret_cast<float*>(ptx::dynamic_smem());  // [nb][X::row(H)]
    if (nb == 1 || NMAX == 1) small_gate_up_rows<FP8, 1, V2, NMAX>(p, xs, slot, e, nt, nb, n0);
    else if (nb == 2 || NMAX == 2) small_gate_up_rows<FP8, (NMAX < 2 ? NMAX : 2), V2, NMAX>(p, xs, slot, e, nt, nb, n0);
    else if (nb == 4 || NMAX == 4) small_gate_up_rows<FP8, (NMAX < 4 ? NMAX : 4), V2, NMAX>(p, xs, slot, e, nt, nb, n0);
    else small_gate_up_rows<FP8, NMAX, V2, NMAX>(p, xs, slot, e, nt, nb, n0);
}

// ---------------------------------------------------------------------------------------------
// 3. down + combine
// ---------------------------------------------------------------------------------------------

// One block = kSmallCols output columns of one token, warp w = column c0 + w, lanes over 16-byte
// chunks of the rows. Every dot's weight chunk is loaded at once (kDownGroup dots: all k + 1 of the
// real model), so a warp pays one memory round trip, not one per group of three as before
// (bench/kernels/NOTES.md "MoE small-T down: one round trip"); the token's h rows are staged in
// shared memory once per block when they fit (p.down_h_smem: the 8 warps of a block read the same
// rows, and registers then hold only the weights). V2 (launched with programmatic dependent
// launch after gate_up, which lets it start only after the router has finished): the first
// step's weight loads are issued before waiting for gate_up's h (the L2 prefetch of every row
// that stood there before is gone: at 2 blocks per SM, 128 registers, it made the kernel spill;
// later steps, only past 9 dots or 32 chunks a row, e.g. BF16's second chunk, load after the
// first's FMAs). Sums in the same order as before (per dot: chunk by chunk, 16 values in k order;
// y: the dots in j order), so y is bitwise unchanged. 2 blocks per SM (124 registers): the
// grid's T · H / 8 blocks are one wave at T = 1.
template <bool FP8, bool V2>
__global__ __launch_bounds__(kSmallThreads, 2) void moe_small_down_kernel(SmallParams p) {
    constexpr int VPC = FP8 ? 16 : 8, G = kDownGroup;
    const int t = blockIdx.x, lane = threadIdx.x & 31;
    const int col = blockIdx.y * kSmallCols + (threadIdx.x >> 5);
    const int k = p.k, ndots = k + 1;  // the routed experts in j order, then the shared one
    const int Imax = p.I > p.I_shared ? p.I : p.I_shared;
    const int max_nch = Imax / VPC;
    // Dots j0 .. j0 + G - 1: their experts (-1 past the last dot). Only the experts stay in
    // registers between the loads and the FMAs (the weight chunks and their scales are loaded
    // together): with row pointers per dot the kernel took 139 registers, one block per SM.
    int ex[G];
    auto setup = [&](int j0) {
#pragma unroll
        for (int g = 0; g < G; ++g) {
            const int j = j0 + g;
            // V2: before griddep_wait, the router's topk_id (complete: gate_up let this grid start
            // only after its own wait) is read from L2.
            ex[g] = j >= ndots ? -1 : j == k ? p.E : V2 ? load_cg(p.topk_id + t * k + j) : p.topk_id[t * k + j];
        }
    };
    auto width_of = [&](int j) { return j == k ? p.I_shared : p.I; };  // dot j's intermediate size
    auto chunks_of = [&](int j) { return width_of(j) / VPC; };
    uint4 w[G];
    float sc[G];  // FP8: the chunk's 128 × 128 block scale
    auto load_w = [&](int j0, int c0) {
        const int c = c0 + lane;
#pragma unroll
        for (int g = 0; g < G; ++g) {
            const int e = ex[g], Ie = width_of(j0 + g);
            const bool ok = e >= 0 && c < chunks_of(j0 + g);
            w[g] = ok ? load16(static_cast<const unsigned char*>(p.down[e]) + (size_t(col) * Ie + size_t(c) * VPC) *
                                                                               (FP8 ? 1 : 2))
                      : make_uint4(0, 0, 0, 0);
            if constexpr (FP8) sc[g] = ok ? p.down_scale[e][(col / 128) * ((Ie + 127) / 128) + c * VPC / 128] : 0.0f;
        }
    };
    setup(0);
    load_w(0, 0);
    if constexpr (V2) ptx::griddep_wait();
    // h row of dot j: the token's k routed rows, then its shared-expert row; in shared memory
    // [ndots][ldh] when staged.
    auto h_index = [&](int j) { return j == k ? p.T * k + t : t * k + j; };
    __nv_bfloat16* hs = reinterpret_cast<__nv_bfloat16*>(ptx::dynamic_smem());
    if (p.down_h_smem) {
        const int per_row = p.ldh / 8;  // 16-byte pieces (ldh % 8 == 0)
        for (int i = threadIdx.x; i < ndots * per_row; i += kSmallThreads) {
            const int j = i / per_row, c = i % per_row;
            reinterpret_cast<uint4*>(hs)[i] = load_cg(reinterpret_cast<const uint4*>(p.h + size_t(h_index(j)) * p.ldh) + c);
        }
        __syncthreads();
    }
    auto hrow_of = [&](int j) -> const __nv_bfloat16* {
        if (p.down_h_smem) return hs + size_t(j) * p.ldh;
        return p.h + size_t(h_index(j)) * p.ldh;
    };
    float y = 0.0f;
    for (int j0 = 0; j0 < ndots; j0 += G) {
        if (j0 > 0) setup(j0);
        float part[G];
#pragma unroll
        for (int g = 0; g < G; ++g) part[g] = 0.0f;
        for (int c0 = 0; c0 < max_nch; c0 += 32) {
            if (j0 > 0 || c0 > 0) load_w(j0, c0);
            const int c = c0 + lane;
#pragma unroll
            for (int g = 0; g < G; ++g) {
                if (j0 + g >= ndots || c >= chunks_of(j0 + g)) continue;
                const __nv_bfloat16* hrow = hrow_of(j0 + g);
                const uint4 h0 = *reinterpret_cast<const uint4*>(hrow + c * VPC);
                const uint4 h1 = FP8 ? *reinterpret_cast<const uint4*>(hrow + c * VPC + 8) : make_uint4(0, 0, 0, 0);
                const float s = down_chunk_dot<FP8>(w[g], h0, h1);
                if constexpr (FP8) part[g] = fmaf(s, sc[g] * kFp8Unscale, part[g]);
                else part[g] += s;
            }
        }
#pragma unroll
        for (int g = 0; g < G; ++g) {
#pragma unroll
            for (int o = 16; o > 0; o >>= 1) part[g] += __shfl_xor_sync(0xffffffffu, part[g], o);
            const int j = j0 + g;
            const float d = expert_out(part[g], p.eout_bf16);
            if (j < k) y += (V2 ? load_cg(p.topk_w + t * k + j) : p.topk_w[t * k + j]) * d;  // j order, as moe_combine.cu
            else if (j == k) y += 1.0f / (1.0f + expf(-(V2 ? load_cg(p.shared_gate_logit + t) : p.shared_gate_logit[t]))) * d;
        }
    }
    if (lane == 0) p.y[size_t(t) * p.H + col] = y;
}

}  // namespace

#if !defined(QS_MOE_EMULATE)
namespace {

void record_small(cudaEvent_t* ev, int i, cudaStream_t s) {
    if (ev) QS_CUDA_CHECK(cudaEventRecord(ev[i], s));
}

template <bool FP8, int NMAX, bool V2>
void launch_small_gate_up(const SmallPlan& pl, cudaStream_t stream) {
    allow_dynamic_smem<moe_small_gate_up_kernel<FP8, NMAX, V2>>(pl.gate_up_smem);
    if constexpr (V2) {
        QS_CUDA_CHECK(ptx::launch_kernel_pdl(moe_small_gate_up_kernel<FP8, NMAX, V2>, pl.gate_up_grid,
                                             dim3(kSmallThreads), pl.gate_up_smem, stream, pl.p));
    } else {
        moe_small_gate_up_kernel<FP8, NMAX, V2><<<pl.gate_up_grid, kSmallThreads, pl.gate_up_smem, stream>>>(pl.p);
        QS_CUDA_CHECK_LAUNCH();
    }
}

template <bool FP8, bool V2>
void launch_small_gate_up_bucket(const SmallPlan& pl, cudaStream_t stream) {
    switch (pl.nmax) {
        case 1: launch_small_gate_up<FP8, 1, V2>(pl, stream); break;
        case 2: launch_small_gate_up<FP8, 2, V2>(pl, stream); break;
        case 4: launch_small_gate_up<FP8, 4, V2>(pl, stream); break;
        default: launch_small_gate_up<FP8, 8, V2>(pl, stream); break;
    }
}

template <bool FP8, bool V2>
void launch_small_down(const SmallPlan& pl, cudaStream_t stream) {
    if constexpr (V2) {
        QS_CUDA_CHECK(ptx::launch_kernel_pdl(moe_small_down_kernel<FP8, V2>, pl.down_grid, dim3(kSmallThreads),
                                             pl.down_smem, stream, pl.p));
    } else {
        moe_small_down_kernel<FP8, V2><<<pl.down_grid, kSmallThreads, pl.down_smem, stream>>>(pl.p);
        QS_CUDA_CHECK_LAUNCH();
    }
}

}  // namespace

void launch_small(const SmallPlan& pl, cudaStream_t stream, cudaEvent_t* ev) {
    launch_small_route(pl, stream);
    record_small(ev, 1, stream);
    record_small(ev, 2, stream);  // no sort stage
    if (pl.int4) {
        launch_small_int4_stages(pl, stream, ev);
        record_small(ev, 4, stream);
        record_small(ev, 5, stream);
        return;
    }
    const bool v2 = pl.version == 2;
    if (pl.fp8 && v2) launch_small_gate_up_bucket<true, true>(pl, stream);
    else if (pl.fp8) launch_small_gate_up_bucket<true, false>(pl, stream);
    else if (v2) launch_small_gate_up_bucket<false, true>(pl, stream);
    else launch_small_gate_up_bucket<false, false>(pl, stream);
    record_small(ev, 3, stream);
    if (pl.down_version == 2) launch_small_down_slots(pl, stream);
    else if (pl.fp8 && v2) launch_small_down<true, true>(pl, stream);
    else if (pl.fp8) launch_small_down<true, false>(pl, stream);
    else if (v2) launch_small_down<false, true>(pl, stream);
    else launch_small_down<false, false>(pl, stream);
    record_small(ev, 4, stream);
    record_small(ev, 5, stream);  // the combine is fused into down
}
#endif

}  // namespace qs::cuda::moe

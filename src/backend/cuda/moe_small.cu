// MoE small-T path (T <= kMoeSmallTMax tokens: decode and MTP verify steps). Maths in
// moe_kernels.h; CPU reference: src/backend/cpu/cpu_moe.cpp. Three launches, no sort:
//  1. moe_small_route_kernel   one block, warp t routes token t (route_one_token: softmax, top-k,
//                              renormalisation → topk_id/topk_w); then the list of distinct experts
//                              in pair order: slot 0 = the shared expert (all T tokens, h rows
//                              T·k + t), slot s >= 1 = the s-th distinct routed expert with its
//                              tokens in token order (h rows t·k + j); n_slots.
//  2. moe_small_gate_up_kernel grid (max(I, I_shared) / kSmallRows, max slots); a block = kSmallRows
//                              intermediate rows of one slot's expert for all the slot's tokens:
//                              x rows of those tokens → shared memory (fp32 of the bf16-rounded x,
//                              × kFp8AScale for fp8, as the other paths' A operand); warp w takes
//                              rows n0 + 2w, n0 + 2w + 1 (gate and up), lanes stride over 16-byte
//                              weight chunks (each weight byte read once per block), fp32 FMAs;
//                              h = bf16(silu(g)·u (× kFp8AScale)) → h[dest row] (the other paths'
//                              rounding point). Slots past n_slots and rows past I_e exit at once.
//  3. moe_small_down_kernel    grid (T, H / kSmallCols); warp w = output column c0 + w of token t:
//                              d_j = down_{e_j}[c, :] · h[t·k + j] for j < k and the shared expert,
//                              then y = Σ_j w_j·d_j (j order) + σ(sg_t)·d_shared, as moe_combine.cu
//                              sums; each y element written once, no atomics, bitwise deterministic.
// FP8 weights (e4m3, 128×128 block scale_inv): bytes become fp32 value·2^-120 exactly (bit moves);
// each lane's 16-value chunk lies inside one 128-wide K block, its partial dot is multiplied by
// scale_inv·kFp8Unscale (x and h carry kFp8AScale, see moe_common.cuh). A block's 16 rows
// (kSmallRows) and a warp's column lie inside one 128-row scale block.
// Launch shapes depend on T and the shapes only (CUDA-graph capturable); the host never learns the
// routing. Also compiles as host C++ for the CPU emulation (bench/kernels/moe_emu.cpp).
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/moe_common.cuh"
#include "backend/cuda/moe_route_token.cuh"
#if !defined(QS_MOE_EMULATE)
#include "backend/cuda/ptx_helpers.cuh"  // the emulation shim defines qs::cuda::ptx itself
#endif

namespace qs::cuda::moe {
namespace {

constexpr int kSmallWarps = kSmallThreads / 32;
constexpr int kSmallRowsPerWarp = kSmallRows / kSmallWarps;  // intermediate rows (gate + up each)
static_assert(kSmallRows % kSmallWarps == 0 && kSmallCols == kSmallWarps, "small-T tiling");
constexpr int kDownGroup = 3;  // dots whose loads are in flight together (k + 1 = 9 in the real model)

__device__ __forceinline__ float f32_bits(uint32_t u) {
#if defined(QS_MOE_EMULATE)
    float f;
    std::memcpy(&f, &u, 4);
    return f;
#else
    return __uint_as_float(u);
#endif
}

__device__ __forceinline__ uint4 load16(const void* p) {
#if defined(QS_MOE_EMULATE)
    return *static_cast<const uint4*>(p);
#else
    return __ldg(static_cast<const uint4*>(p));
#endif
}

__device__ __forceinline__ uint32_t word(const uint4& v, int i) { return i == 0 ? v.x : i == 1 ? v.y : i == 2 ? v.z : v.w; }

// e4m3 bytes b0..b3 of w (b0 = lowest k) → f[0..3] = value·2^-120 exactly: bf16x2 pairs by the bit
// moves of moe_gemm.cu, then each bf16 becomes the fp32 with the same upper bits.
__device__ __forceinline__ void e4m3x4_to_f32_scaled(uint32_t w, float (&f)[4]) {
    const uint32_t lo = (ptx::prmt(w, 0x9180u) << 4) & 0x87F087F0u;
    const uint32_t hi = (ptx::prmt(w, 0xB3A2u) << 4) & 0x87F087F0u;
    f[0] = f32_bits(lo << 16);
    f[1] = f32_bits(lo & 0xFFFF0000u);
    f[2] = f32_bits(hi << 16);
    f[3] = f32_bits(hi & 0xFFFF0000u);
}

// bf16 pair (element 0 in the low half) → fp32.
__device__ __forceinline__ void bf16x2_to_f32(uint32_t w, float& a, float& b) {
    a = f32_bits(w << 16);
    b = f32_bits(w & 0xFFFF0000u);
}

__device__ __forceinline__ float bf16_round(float v) { return __bfloat162float(__float2bfloat16_rn(v)); }

__device__ __forceinline__ int token_of_dest(const SmallParams& p, int dest) {
    return dest < p.T * p.k ? dest / p.k : dest - p.T * p.k;
}

// Tokens a gate_up block computes for: the slot's count rounded up to 1, 2, 4 or 8.
__device__ __forceinline__ int token_bucket(int n) { return n <= 1 ? 1 : n <= 2 ? 2 : n <= 4 ? 4 : 8; }

// ---------------------------------------------------------------------------------------------
// 1. Routing and the list of distinct experts (one block)
// ---------------------------------------------------------------------------------------------

template <int VPL>
__global__ __launch_bounds__(kSmallThreads) void moe_small_route_kernel(SmallParams p) {
    __shared__ int s_id[kSmallThreads];
    __shared__ float s_w[kSmallThreads];
    __shared__ int s_first[kSmallThreads];
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int n = p.T * p.k;  // <= kSmallThreads (host check)
    if (warp < p.T) route_one_token<VPL>(p.router_logits + size_t(warp) * p.E, p.E, p.k, p.norm_topk_prob, lane,
                                         s_id + warp * p.k, s_w + warp * p.k);
    __syncthreads();
    int e = -1, first = tid, pos = 0;
    if (tid < n) {
        e = s_id[tid];
        p.topk_id[tid] = e;
        p.topk_w[tid] = s_w[tid];
        for (int i = 0; i < tid; ++i) {
            if (s_id[i] == e) {
                if (first == tid) first = i;
                ++pos;  // earlier tokens of the same expert (one pair per token and expert)
            }
        }
        s_first[tid] = first == tid ? 1 : 0;
    }
    __syncthreads();
    if (tid < n) {
        int slot = 1;
        for (int i = 0; i < first; ++i) slot += s_first[i];
        p.slot_dest[slot * p.T + pos] = tid;
        if (first == tid) {
            int c = 0;
            for (int i = tid; i < n; ++i) c += s_id[i] == e ? 1 : 0;
            p.slot_expert[slot] = e;
            p.slot_count[slot] = c;
        }
    }
    if (tid < p.T) p.slot_dest[tid] = n + tid;  // slot 0: the shared expert, every token
    if (tid == 0) {
        int c = 1;
        for (int i = 0; i < n; ++i) c += s_first[i];
        *p.n_slots = c;
        p.slot_expert[0] = p.E;
        p.slot_count[0] = p.T;
    }
}

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

template <bool FP8, int N>
__device__ __forceinline__ void small_gate_up_rows(const SmallParams& p, const float* xs, int slot, int e, int nt,
                                                   int n0) {
    using X = SmallX<FP8>;
    constexpr int VPC = X::VPC, RPW = kSmallRowsPerWarp, NR = 2 * RPW;
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

    for (int c0 = 0; c0 < nch; c0 += 64) {  // two chunks per lane per step: 2·NR loads in flight
        uint4 w[2][NR];
#pragma unroll
        for (int u = 0; u < 2; ++u) {
            const int c = c0 + 32 * u + lane;
#pragma unroll
            for (int i = 0; i < NR; ++i) w[u][i] = c < nch ? load16(wrow[i] + size_t(c) * 16) : make_uint4(0, 0, 0, 0);
        }
#pragma unroll
        for (int u = 0; u < 2; ++u) {
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
            const int dest = p.slot_dest[slot * p.T + n];
            p.h[size_t(dest) * p.ldh + r0 + i] = __float2bfloat16_rn(h);
        }
    }
}

// NMAX = token_bucket(T): the largest bucket a slot can need (the shared expert's slot has T tokens);
// instantiated per bucket so that T = 1 does not pay the registers of the 8-token accumulators.
template <bool FP8, int NMAX>
__global__ __launch_bounds__(kSmallThreads, 2) void moe_small_gate_up_kernel(SmallParams p) {
    using X = SmallX<FP8>;
    const int slot = blockIdx.y;
    if (slot >= *p.n_slots) return;
    const int e = p.slot_expert[slot], nt = p.slot_count[slot];
    const int Ie = e == p.E ? p.I_shared : p.I;
    const int n0 = blockIdx.x * kSmallRows;
    if (n0 >= Ie) return;
    const int nb = token_bucket(nt);
    float* xs = reinterpret_cast<float*>(ptx::dynamic_smem());  // [nb][X::row(H)]
    const int H = p.H, xrow = X::row(H), h2 = H / 2;
    const float sc = FP8 ? kFp8AScale : 1.0f;
    for (int n = 0; n < nb; ++n) {
        const float2* src = nullptr;
        if (n < nt) src = reinterpret_cast<const float2*>(p.x + size_t(token_of_dest(p, p.slot_dest[slot * p.T + n])) * H);
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
    __syncthreads();
    if (nb == 1 || NMAX == 1) small_gate_up_rows<FP8, 1>(p, xs, slot, e, nt, n0);
    else if (nb == 2 || NMAX == 2) small_gate_up_rows<FP8, (NMAX < 2 ? NMAX : 2)>(p, xs, slot, e, nt, n0);
    else if (nb == 4 || NMAX == 4) small_gate_up_rows<FP8, (NMAX < 4 ? NMAX : 4)>(p, xs, slot, e, nt, n0);
    else small_gate_up_rows<FP8, NMAX>(p, xs, slot, e, nt, n0);
}

// ---------------------------------------------------------------------------------------------
// 3. down + combine
// ---------------------------------------------------------------------------------------------

template <bool FP8>
__global__ __launch_bounds__(kSmallThreads) void moe_small_down_kernel(SmallParams p) {
    constexpr int VPC = FP8 ? 16 : 8, G = kDownGroup;
    const int t = blockIdx.x, lane = threadIdx.x & 31;
    const int col = blockIdx.y * kSmallCols + (threadIdx.x >> 5);
    const int k = p.k, ndots = k + 1;  // the routed experts in j order, then the shared one
    const int max_nch = (p.I > p.I_shared ? p.I : p.I_shared) / VPC;
    float y = 0.0f;
    for (int j0 = 0; j0 < ndots; j0 += G) {
        const unsigned char* wrow[G];
        const __nv_bfloat16* hrow[G];
        int nch[G];
        const float* srow[G];
#pragma unroll
        for (int g = 0; g < G; ++g) {
            const int j = j0 + g;
            nch[g] = 0;
            wrow[g] = nullptr;
            hrow[g] = nullptr;
            srow[g] = nullptr;
            if (j >= ndots) continue;
            const bool shared = j == k;
            const int e = shared ? p.E : p.topk_id[t * k + j];
            const int dest = shared ? p.T * k + t : t * k + j;
            const int Ie = shared ? p.I_shared : p.I;
            nch[g] = Ie / VPC;
            wrow[g] = static_cast<const unsigned char*>(p.down[e]) + size_t(col) * Ie * (FP8 ? 1 : 2);
            hrow[g] = p.h + size_t(dest) * p.ldh;
            if constexpr (FP8) srow[g] = p.down_scale[e] + (col / 128) * ((Ie + 127) / 128);
        }
        float part[G];
#pragma unroll
        for (int g = 0; g < G; ++g) part[g] = 0.0f;
        for (int c0 = 0; c0 < max_nch; c0 += 32) {
            const int c = c0 + lane;
            uint4 w[G], h0[G], h1[G];
#pragma unroll
            for (int g = 0; g < G; ++g) {
                const bool ok = c < nch[g];
                w[g] = ok ? load16(wrow[g] + size_t(c) * 16) : make_uint4(0, 0, 0, 0);
                h0[g] = ok ? *reinterpret_cast<const uint4*>(hrow[g] + c * VPC) : make_uint4(0, 0, 0, 0);
                h1[g] = ok && FP8 ? *reinterpret_cast<const uint4*>(hrow[g] + c * VPC + 8) : make_uint4(0, 0, 0, 0);
            }
#pragma unroll
            for (int g = 0; g < G; ++g) {
                if (c >= nch[g]) continue;
                float s = 0.0f;
#pragma unroll
                for (int q = 0; q < 4; ++q) {
                    if constexpr (FP8) {
                        float wf[4], a0, a1, a2, a3;
                        e4m3x4_to_f32_scaled(word(w[g], q), wf);
                        bf16x2_to_f32(word(q < 2 ? h0[g] : h1[g], (2 * q) & 3), a0, a1);
                        bf16x2_to_f32(word(q < 2 ? h0[g] : h1[g], (2 * q + 1) & 3), a2, a3);
                        s = fmaf(wf[0], a0, s);
                        s = fmaf(wf[1], a1, s);
                        s = fmaf(wf[2], a2, s);
                        s = fmaf(wf[3], a3, s);
                    } else {
                        float w0, w1, a0, a1;
                        bf16x2_to_f32(word(w[g], q), w0, w1);
                        bf16x2_to_f32(word(h0[g], q), a0, a1);
                        s = fmaf(w0, a0, s);
                        s = fmaf(w1, a1, s);
                    }
                }
                if constexpr (FP8) part[g] = fmaf(s, srow[g][c * VPC / 128] * kFp8Unscale, part[g]);
                else part[g] += s;
            }
        }
#pragma unroll
        for (int g = 0; g < G; ++g) {
#pragma unroll
            for (int o = 16; o > 0; o >>= 1) part[g] += __shfl_xor_sync(0xffffffffu, part[g], o);
            const int j = j0 + g;
            if (j < k) y += p.topk_w[t * k + j] * part[g];  // summed in j order, as moe_combine.cu
            else if (j == k) y += 1.0f / (1.0f + expf(-p.shared_gate_logit[t])) * part[g];
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

template <bool FP8, int NMAX>
void launch_small_gate_up(const SmallPlan& pl, cudaStream_t stream) {
    static size_t smem_set = 48 * 1024;  // the default limit; raised once per kernel as needed
    if (pl.gate_up_smem > smem_set) {
        QS_CUDA_CHECK(cudaFuncSetAttribute(moe_small_gate_up_kernel<FP8, NMAX>,
                                           cudaFuncAttributeMaxDynamicSharedMemorySize, int(pl.gate_up_smem)));
        smem_set = pl.gate_up_smem;
    }
    moe_small_gate_up_kernel<FP8, NMAX><<<pl.gate_up_grid, kSmallThreads, pl.gate_up_smem, stream>>>(pl.p);
    QS_CUDA_CHECK_LAUNCH();
}

template <bool FP8>
void launch_small_gate_up_bucket(const SmallPlan& pl, cudaStream_t stream) {
    switch (pl.nmax) {
        case 1: launch_small_gate_up<FP8, 1>(pl, stream); break;
        case 2: launch_small_gate_up<FP8, 2>(pl, stream); break;
        case 4: launch_small_gate_up<FP8, 4>(pl, stream); break;
        default: launch_small_gate_up<FP8, 8>(pl, stream); break;
    }
}

}  // namespace

void launch_small(const SmallPlan& pl, cudaStream_t stream, cudaEvent_t* ev) {
    switch (pl.route_vpl) {
        case 1: moe_small_route_kernel<1><<<1, kSmallThreads, 0, stream>>>(pl.p); break;
        case 2: moe_small_route_kernel<2><<<1, kSmallThreads, 0, stream>>>(pl.p); break;
        case 4: moe_small_route_kernel<4><<<1, kSmallThreads, 0, stream>>>(pl.p); break;
        case 8: moe_small_route_kernel<8><<<1, kSmallThreads, 0, stream>>>(pl.p); break;
        default: moe_small_route_kernel<16><<<1, kSmallThreads, 0, stream>>>(pl.p); break;
    }
    QS_CUDA_CHECK_LAUNCH();
    record_small(ev, 1, stream);
    record_small(ev, 2, stream);  // no sort stage
    if (pl.fp8) launch_small_gate_up_bucket<true>(pl, stream);
    else launch_small_gate_up_bucket<false>(pl, stream);
    record_small(ev, 3, stream);
    if (pl.fp8) moe_small_down_kernel<true><<<pl.down_grid, kSmallThreads, 0, stream>>>(pl.p);
    else moe_small_down_kernel<false><<<pl.down_grid, kSmallThreads, 0, stream>>>(pl.p);
    QS_CUDA_CHECK_LAUNCH();
    record_small(ev, 4, stream);
    record_small(ev, 5, stream);  // the combine is fused into down
}
#endif

}  // namespace qs::cuda::moe

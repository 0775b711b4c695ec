// router_gemm.h's kernel. A block takes BM = 16·WM tokens and NB rows of W (all 272 at large T;
// fewer, over several blocks along y, when the token tiles alone do not fill the GPU). Its WM × 2
// warps each own 16 tokens × NB/2 rows: NB/16 ≤ 17 n8 tiles of fp32 accumulators (68 registers).
// K is walked in steps of BK (32, or 64 for variant 4) through a STAGES-deep cp.async ring: x as
// fp32 [BM, BK] (split into three bf16 terms when the A fragments are read, never stored split),
// Wh and Wl as bf16 [NB, BK]. Rows are padded by 8 elements (x: 32 bytes, W: 16 bytes) so the
// fragment reads are free of bank conflicts. Rows past T and columns past H are zero-filled by the
// copies, whose addresses each thread computes once (the k-step adds k0).
#include "backend/cuda/router_gemm.h"

#include <algorithm>

#include <cuda_bf16.h>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/device_limits.h"
#include "backend/cuda/ptx_helpers.cuh"
#include "core/check.h"
#include "core/dtype.h"

namespace qs::cuda {

namespace {

// a = hi + mid + lo exactly: hi = bf16(a), mid = bf16(a - hi), lo = a - hi - mid (at most 8
// significant bits left: exact in bf16; both subtractions are exact in fp32). Two elements packed
// (element 0 in the low half, as mma reads). Exact, not two terms: with hi + mid only, the dropped
// remainder (up to 2^-17 |a|) makes the logits a step function of x, and a one-ulp change of x
// upstream (another batch's summation order) moved them ~6x more than in fp32 (NOTES.md "Router:
// the two-way split dithers").
__device__ __forceinline__ void split3(float2 v, uint32_t& hi, uint32_t& mid, uint32_t& lo) {
    const __nv_bfloat162 h = __floats2bfloat162_rn(v.x, v.y);
    const float rx = v.x - __low2float(h), ry = v.y - __high2float(h);
    const __nv_bfloat162 m = __floats2bfloat162_rn(rx, ry);
    const __nv_bfloat162 l = __floats2bfloat162_rn(rx - __low2float(m), ry - __high2float(m));
    hi = *reinterpret_cast<const uint32_t*>(&h);
    mid = *reinterpret_cast<const uint32_t*>(&m);
    lo = *reinterpret_cast<const uint32_t*>(&l);
}

// BK: K per ring stage (32 or 64). Rows are padded by 8 elements (x: 32 bytes, W: 16 bytes): the
// fragment reads are then free of bank conflicts at either BK (row strides of 8 and 4 banks mod 32).
template <int WM, int STAGES, bool LO, int BK>
struct RouterTile {
    static_assert(BK == 32 || BK == 64, "BK");
    static constexpr int kThreads = WM * 2 * 32;
    static constexpr int kBM = 16 * WM;
    static constexpr int kXStride = BK + 8;  // floats per x row in shared memory
    static constexpr int kWStride = BK + 8;  // bf16 per W row in shared memory
    // The 16-token tiles are for latency-bound sizes: one n16 column per block (17 blocks along
    // y) and a deep ring (7 k-steps in flight, 40 KB) instead of wide tiles.
    static constexpr int kMaxNb = WM == 1 ? 16 : kRouterMaxRows;
    __host__ __device__ static size_t stage_bytes(int nb) {
        return size_t(kBM) * kXStride * 4 + size_t(nb) * kWStride * 2 * (LO ? 2 : 1);
    }
    static size_t smem_bytes(int nb) { return STAGES * stage_bytes(nb); }
};

// grid (ceil(T / BM), ceil(Npad / nb)); nb a multiple of 16, <= 272. FULL: nb is the tile's most
// (all 272 rows in one block, as at every large T): the n8 tile count is then a constant, so the
// compute loop carries no per-tile predicate.
template <int WM, int STAGES, bool LO, int BK, bool FULL>
__global__ void __launch_bounds__(WM * 64) router_logits_kernel(const float* __restrict__ x, int T, int H,
                                                               const uint16_t* __restrict__ w_hi,
                                                               const uint16_t* __restrict__ w_lo, int n_pad,
                                                               int nb, int E, float* __restrict__ logits,
                                                               float* __restrict__ gate) {
    using Tile = RouterTile<WM, STAGES, LO, BK>;
    constexpr int BM = Tile::kBM, kXStride = Tile::kXStride, kWStride = Tile::kWStride;
    constexpr int kTiles = Tile::kMaxNb / 16;  // n8 tiles of a warp at most
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int wm = warp >> 1, wn = warp & 1;
    const int m0 = blockIdx.x * BM, n0 = blockIdx.y * nb;
    const int nt = FULL ? kTiles : nb / 16;  // n8 tiles per warp
    const int ktiles = (H + BK - 1) / BK;

    uint8_t* smem = ptx::dynamic_smem();
    const size_t stage_bytes = Tile::stage_bytes(nb);
    auto xs = [&](int s) { return reinterpret_cast<float*>(smem + s * stage_bytes); };
    auto whs = [&](int s) { return reinterpret_cast<uint16_t*>(smem + s * stage_bytes + size_t(BM) * kXStride * 4); };
    auto wls = [&](int s) { return whs(s) + size_t(nb) * kWStride; };

    // Each thread's copies are the same at every k-step but for k0: x rows xr + i·kXRowStep (BM·BK/4
    // 16-byte chunks: BK/16 a thread), column chunk xc; W rows wr + i·kWRowStep (< nb), column
    // chunk wc, hi then lo. Their sources, destinations and row masks are computed once here: the
    // per-step index arithmetic (an integer division by the runtime nb among it) had made the
    // ring's copies ~8 instructions per mma of the k-step (bench/kernels/NOTES.md "Session 35").
    constexpr int kXChunks = BK / 4, kWChunks = BK / 8;  // 16-byte chunks of a row per stage
    constexpr int kXRowStep = Tile::kThreads / kXChunks, kXIters = BM / kXRowStep;
    constexpr int kWRowStep = Tile::kThreads / kWChunks;
    constexpr int kWIters = (Tile::kMaxNb + kWRowStep - 1) / kWRowStep;
    static_assert(BM % kXRowStep == 0, "x rows split evenly over the threads");
    const int xc = (tid % kXChunks) * 4, wc = (tid % kWChunks) * 8;
    int xoff[kXIters];  // element offset of the row's chunk in x (row 0 when masked; T·H < 2^31)
    uint32_t xdst[kXIters];
    bool xok[kXIters];
#pragma unroll
    for (int i = 0; i < kXIters; ++i) {
        const int r = tid / kXChunks + i * kXRowStep;
        xok[i] = m0 + r < T;
        xoff[i] = (xok[i] ? m0 + r : 0) * H + xc;
        xdst[i] = uint32_t((r * kXStride + xc) * 4);
    }
    int woff[kWIters];       // element offset of the row's chunk in W (row 0 when masked)
    uint32_t wdst[kWIters];  // byte offset of the hi chunk in a stage
    bool wok[kWIters], win[kWIters];
#pragma unroll
    for (int i = 0; i < kWIters; ++i) {
        const int r = tid / kWChunks + i * kWRowStep;
        win[i] = r < nb;
        wok[i] = n0 + r < n_pad;
        woff[i] = (wok[i] ? n0 + r : 0) * H + wc;
        wdst[i] = uint32_t(BM * kXStride * 4 + (r * kWStride + wc) * 2);
    }
    const uint32_t w_lo_bytes = uint32_t(nb * kWStride * 2);  // lo rows follow the hi rows
    auto load = [&](int s, int kt) {
        const int k0 = kt * BK;
        const uint32_t stage = ptx::smem_u32(smem + s * stage_bytes);
#pragma unroll
        for (int i = 0; i < kXIters; ++i) {
            const bool ok = xok[i] && k0 + xc < H;  // H % 8 == 0: a chunk is wholly inside or past H
            ptx::cp_async16(stage + xdst[i], ok ? x + xoff[i] + k0 : x, ok ? 16 : 0);
        }
#pragma unroll
        for (int i = 0; i < kWIters; ++i) {
            if (!win[i]) continue;
            const bool ok = wok[i] && k0 + wc < H;
            ptx::cp_async16(stage + wdst[i], ok ? w_hi + woff[i] + k0 : w_hi, ok ? 16 : 0);
            if constexpr (LO) ptx::cp_async16(stage + wdst[i] + w_lo_bytes, ok ? w_lo + woff[i] + k0 : w_lo, ok ? 16 : 0);
        }
    };

    float acc[kTiles][4];
#pragma unroll
    for (int j = 0; j < kTiles; ++j) acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.f;

#pragma unroll
    for (int s = 0; s < STAGES - 1; ++s) {
        if (s < ktiles) load(s, s);
        ptx::cp_async_commit();
    }
    const int g = lane >> 2, t = lane & 3;
    for (int kt = 0; kt < ktiles; ++kt) {
        ptx::cp_async_wait<STAGES - 2>();
        __syncthreads();  // stage kt landed for every thread; stage kt - 1 is free to refill
        if (kt + STAGES - 1 < ktiles) load((kt + STAGES - 1) % STAGES, kt + STAGES - 1);
        ptx::cp_async_commit();
        const int s = kt % STAGES;
        const float* xa = xs(s) + (wm * 16 + g) * kXStride + 2 * t;
        const uint16_t* wh = whs(s) + (wn * (nb / 2) + g) * kWStride + 2 * t;
        const uint16_t* wl = wls(s) + (wn * (nb / 2) + g) * kWStride + 2 * t;
#pragma unroll
        for (int kk = 0; kk < BK; kk += 16) {
            uint32_t ah[4], am[4], al[4];
            split3(*reinterpret_cast<const float2*>(xa + kk), ah[0], am[0], al[0]);
            split3(*reinterpret_cast<const float2*>(xa + 8 * kXStride + kk), ah[1], am[1], al[1]);
            split3(*reinterpret_cast<const float2*>(xa + kk + 8), ah[2], am[2], al[2]);
            split3(*reinterpret_cast<const float2*>(xa + 8 * kXStride + kk + 8), ah[3], am[3], al[3]);
#pragma unroll
            for (int j = 0; j < kTiles; ++j) {
                if (FULL || j < nt) {
                    const uint16_t* b = wh + j * 8 * kWStride + kk;
                    const uint32_t bh0 = *reinterpret_cast<const uint32_t*>(b);
                    const uint32_t bh1 = *reinterpret_cast<const uint32_t*>(b + 8);
                    ptx::mma_16816_bf16(acc[j], ah, bh0, bh1);
                    ptx::mma_16816_bf16(acc[j], am, bh0, bh1);
                    ptx::mma_16816_bf16(acc[j], al, bh0, bh1);
                    if constexpr (LO) {
                        // x·Wl to (xh + xm)·Wl: the dropped xl·Wl is ≤ 2^-25 of x·W.
                        const uint16_t* bl = wl + j * 8 * kWStride + kk;
                        const uint32_t bl0 = *reinterpret_cast<const uint32_t*>(bl);
                        const uint32_t bl1 = *reinterpret_cast<const uint32_t*>(bl + 8);
                        ptx::mma_16816_bf16(acc[j], ah, bl0, bl1);
                        ptx::mma_16816_bf16(acc[j], am, bl0, bl1);
                    }
                }
            }
        }
    }
    ptx::cp_async_wait<0>();

    // c0, c1: token g, rows 2t, 2t + 1 of the tile; c2, c3: token g + 8.
#pragma unroll
    for (int j = 0; j < kTiles; ++j) {
        if (!FULL && j >= nt) continue;
        const int n = n0 + wn * (nb / 2) + j * 8 + 2 * t;
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int m = m0 + wm * 16 + g + 8 * h;
            if (m >= T) continue;
#pragma unroll
            for (int i = 0; i < 2; ++i) {
                const int e = n + i;
                const float v = acc[j][2 * h + i];
                if (e < E) logits[size_t(m) * E + e] = v;
                else if (e == E) gate[m] = v;
            }
        }
    }
}

template <int WM, int STAGES, bool LO, int BK, bool FULL>
void launch_kernel(dim3 grid, size_t smem, const float* x, int T, int H, const uint16_t* w_hi, const uint16_t* w_lo,
                   int n_pad, int nb, int E, float* logits, float* gate, cudaStream_t stream) {
    allow_dynamic_smem<router_logits_kernel<WM, STAGES, LO, BK, FULL>>(smem);
    ptx::launch_kernel(router_logits_kernel<WM, STAGES, LO, BK, FULL>, grid, dim3(RouterTile<WM, STAGES, LO, BK>::kThreads),
                       smem, stream, x, T, H, w_hi, w_lo, n_pad, nb, E, logits, gate);
    QS_CUDA_CHECK(cudaGetLastError());
}

template <int WM, int STAGES, bool LO, int BK = 32>
void launch_tile(const float* x, int T, int H, const uint16_t* w_hi, const uint16_t* w_lo, int n_pad, int E,
                 float* logits, float* gate, cudaStream_t stream) {
    using Tile = RouterTile<WM, STAGES, LO, BK>;
    const int mblocks = (T + Tile::kBM - 1) / Tile::kBM;
    // Split the rows over blocks along y only while the token tiles leave SMs idle: the 128-token
    // tiles (one block per SM) to at most a wave, the smaller ones (several blocks per SM) to at
    // least one.
    const int tiles16 = n_pad / 16;
    const int per_sm = WM == 8 ? sm_count() / mblocks : (sm_count() + mblocks - 1) / mblocks;
    const int want_y = std::max(1, std::min(tiles16, per_sm));
    const int nb = std::min(Tile::kMaxNb, 16 * ((tiles16 + want_y - 1) / want_y));
    const dim3 grid(unsigned(mblocks), unsigned((n_pad + nb - 1) / nb));
    const size_t smem = Tile::smem_bytes(nb);
    if (nb == Tile::kMaxNb) launch_kernel<WM, STAGES, LO, BK, true>(grid, smem, x, T, H, w_hi, w_lo, n_pad, nb, E, logits, gate, stream);
    else launch_kernel<WM, STAGES, LO, BK, false>(grid, smem, x, T, H, w_hi, w_lo, n_pad, nb, E, logits, gate, stream);
}

template <int WM, int STAGES>
void launch_lo(bool lo, const float* x, int T, int H, const uint16_t* w_hi, const uint16_t* w_lo, int n_pad, int E,
               float* logits, float* gate, cudaStream_t stream) {
    if (lo) launch_tile<WM, STAGES, true>(x, T, H, w_hi, w_lo, n_pad, E, logits, gate, stream);
    else launch_tile<WM, STAGES, false>(x, T, H, w_hi, w_lo, n_pad, E, logits, gate, stream);
}

}  // namespace

bool router_logits_supported(int64_t E, int64_t H) { return E >= 1 && E + 1 <= kRouterMaxRows && H >= 8 && H % 8 == 0; }

int64_t router_padded_rows(int64_t E) { return (E + 1 + 15) / 16 * 16; }

bool router_split_weights(const std::vector<float>& w, int64_t rows, int64_t padded_rows, int64_t H,
                          std::vector<uint16_t>& hi, std::vector<uint16_t>& lo) {
    QS_CHECK(int64_t(w.size()) == rows * H && padded_rows >= rows);
    hi.assign(size_t(padded_rows * H), 0);
    lo.assign(size_t(padded_rows * H), 0);
    bool any_lo = false;
    for (size_t i = 0; i < w.size(); ++i) {
        const bf16 h = f32_to_bf16(w[i]);
        const bf16 l = f32_to_bf16(w[i] - bf16_to_f32(h));
        hi[i] = h.bits;
        lo[i] = l.bits;
        any_lo = any_lo || (l.bits & 0x7fff) != 0;
    }
    return any_lo;
}

void launch_router_logits(const float* x, int64_t T, int64_t H, const uint16_t* w_hi, const uint16_t* w_lo,
                          int64_t E, float* logits, float* gate, cudaStream_t stream, int variant) {
    QS_CHECK_MSG(router_logits_supported(E, H), "launch_router_logits: unsupported router shape");
    QS_CHECK(T >= 1 && T < (int64_t(1) << 31) / H);
    QS_CHECK_MSG(reinterpret_cast<uintptr_t>(x) % 16 == 0 && reinterpret_cast<uintptr_t>(w_hi) % 16 == 0 &&
                     reinterpret_cast<uintptr_t>(w_lo) % 16 == 0,
                 "launch_router_logits: x and W must be 16-byte aligned (cp.async)");
    const int n_pad = int(router_padded_rows(E));
    const bool lo = w_lo != nullptr;
    // 128-token tiles (16 warps, one block per SM) from 2,048 rows, K 64 a stage in 2 stages
    // (variant 4: half the barriers of variant 1's 3 stages of K 32, the same bytes in flight; with
    // lo operands, whose 272 rows would need 230 KB there, variant 1); below, the 16-token tiles
    // (2 warps, 8 stages; an H100 in session 35: 25 µs at 1-64 rows, 36 at 512, 62 at 1,024, where
    // the 64-token tiles of variant 3 took 108-140). Below a full wave the rows are spread over
    // blocks along y (x is then re-read per row block, from L2). Every variant gives each
    // accumulator the same mma sequence: the same bits (router_lab checks it).
    if (variant == 0) variant = T >= 2048 ? 4 : 2;
    if (variant == 4 && lo) variant = 1;
    if (variant == 1) launch_lo<8, 3>(lo, x, int(T), int(H), w_hi, w_lo, n_pad, int(E), logits, gate, stream);
    else if (variant == 4) launch_tile<8, 2, false, 64>(x, int(T), int(H), w_hi, w_lo, n_pad, int(E), logits, gate, stream);
    else if (variant == 3) launch_lo<4, 3>(lo, x, int(T), int(H), w_hi, w_lo, n_pad, int(E), logits, gate, stream);
    else launch_lo<1, 8>(lo, x, int(T), int(H), w_hi, w_lo, n_pad, int(E), logits, gate, stream);
}

}  // namespace qs::cuda

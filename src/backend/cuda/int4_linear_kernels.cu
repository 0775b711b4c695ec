// INT4 W4A16 and NVFP4 small-row dense linears (see int4_linear_kernels.h).
//
// Grid: ceil(out / (8·RPW)) blocks of 8 warps; warp w of block b computes output rows
// (8b + w)·RPW + r, r < RPW, for all T rows of x. Lane l reads 16-byte chunks c = l, l + 32, ...
// of each of its rows (inputs 32c .. 32c + 31; all RPW rows' chunks are loaded before any is
// used), then per 8-input word: unpack the RPW rows' codes (int4_unpack.cuh), load and round the 8
// x values of each token once, accumulate q·x in fp32 and add part · scale to the row's sum. A
// shuffle reduction gives y. Also compiles as host C++ for the SIMT emulation
// (bench/kernels/emu/int4_emu.cpp).
#include "backend/cuda/int4_linear_kernels.h"

#include <cuda_bf16.h>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/int4_unpack.cuh"
#include "backend/cuda/ptx_helpers.cuh"
#include "core/check.h"

namespace qs::cuda {
namespace {

constexpr int kWarps = 8;

__device__ __forceinline__ float round_bf16(float v) { return __bfloat162float(__float2bfloat16_rn(v)); }

// F: the codes' format (int4_unpack.cuh); global: NVFP4's per-matrix multiplier (unused for INT4).
template <w4::Code4 F, int T, int RPW>
__global__ __launch_bounds__(kWarps * 32) void int4_linear_kernel(const uint32_t* __restrict__ codes,
                                                                  const uint16_t* __restrict__ scales, int out,
                                                                  int in, int group, const float* __restrict__ x,
                                                                  float* __restrict__ y, float global) {
    const int lane = threadIdx.x & 31;
    const int o0 = (blockIdx.x * kWarps + (threadIdx.x >> 5)) * RPW;
    if (o0 >= out) return;
    const int words = in / 8, chunks = in / 32, groups = in / group;
    const uint4* wrow[RPW];
    const uint16_t* srow[RPW];
#pragma unroll
    for (int r = 0; r < RPW; ++r) {
        const int o = o0 + r < out ? o0 + r : out - 1;  // rows past out: recomputed, never stored
        wrow[r] = reinterpret_cast<const uint4*>(codes + size_t(o) * words);
        srow[r] = scales + size_t(o) * groups;
    }
    float acc[RPW][T];
#pragma unroll
    for (int r = 0; r < RPW; ++r)
#pragma unroll
        for (int t = 0; t < T; ++t) acc[r][t] = 0.0f;
#pragma unroll 2
    for (int c = lane; c < chunks; c += 32) {
        uint4 w[RPW];
#pragma unroll
        for (int r = 0; r < RPW; ++r) w[r] = __ldg(wrow[r] + c);
#pragma unroll
        for (int q = 0; q < 4; ++q) {
            const int k0 = 32 * c + 8 * q;
            float wf[RPW][8];
            float s[RPW];
#pragma unroll
            for (int r = 0; r < RPW; ++r) {
                const uint32_t wq = q == 0 ? w[r].x : q == 1 ? w[r].y : q == 2 ? w[r].z : w[r].w;
                w4::unpack8<F>(wq, wf[r]);
                s[r] = w4::bf16_bits_f32(__ldg(srow[r] + k0 / group));
            }
#pragma unroll
            for (int t = 0; t < T; ++t) {
                const float4* xp = reinterpret_cast<const float4*>(x + size_t(t) * in + k0);
                const float4 a = __ldg(xp), b = __ldg(xp + 1);
                const float xv[8] = {round_bf16(a.x), round_bf16(a.y), round_bf16(a.z), round_bf16(a.w),
                                     round_bf16(b.x), round_bf16(b.y), round_bf16(b.z), round_bf16(b.w)};
#pragma unroll
                for (int r = 0; r < RPW; ++r) {
                    float d = 0.0f;
#pragma unroll
                    for (int j = 0; j < 8; ++j) d = fmaf(wf[r][j], xv[j], d);
                    acc[r][t] = fmaf(d, s[r], acc[r][t]);
                }
            }
        }
    }
#pragma unroll
    for (int r = 0; r < RPW; ++r)
#pragma unroll
        for (int t = 0; t < T; ++t) {
            float v = acc[r][t];
#pragma unroll
            for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
            if constexpr (F == w4::Code4::kNvfp4) v *= global;
            if (lane == 0 && o0 + r < out) y[size_t(t) * out + o0 + r] = v;
        }
}

template <w4::Code4 F, int T, int RPW>
void launch_rows(const uint32_t* codes, const uint16_t* scales, int out, int in, int group, const float* x, float* y,
                 float global, cudaStream_t stream) {
    const dim3 grid((out + kWarps * RPW - 1) / (kWarps * RPW)), block(kWarps * 32);
    ptx::launch_kernel(int4_linear_kernel<F, T, RPW>, grid, block, 0, stream, codes, scales, out, in, group, x, y,
                       global);
    QS_CUDA_CHECK_LAUNCH();
}

template <w4::Code4 F, int RPW>
void launch_rpw(const uint32_t* codes, const uint16_t* scales, int out, int in, int group, const float* x, int T,
                float* y, float global, cudaStream_t stream) {
    switch (T) {
        case 1: launch_rows<F, 1, RPW>(codes, scales, out, in, group, x, y, global, stream); break;
        case 2: launch_rows<F, 2, RPW>(codes, scales, out, in, group, x, y, global, stream); break;
        case 3: launch_rows<F, 3, RPW>(codes, scales, out, in, group, x, y, global, stream); break;
        case 4: launch_rows<F, 4, RPW>(codes, scales, out, in, group, x, y, global, stream); break;
        case 5: launch_rows<F, 5, RPW>(codes, scales, out, in, group, x, y, global, stream); break;
        case 6: launch_rows<F, 6, RPW>(codes, scales, out, in, group, x, y, global, stream); break;
        case 7: launch_rows<F, 7, RPW>(codes, scales, out, in, group, x, y, global, stream); break;
        default: launch_rows<F, 8, RPW>(codes, scales, out, in, group, x, y, global, stream); break;
    }
}

}  // namespace

bool int4_linear_supports(int64_t T, int64_t in, int64_t group, const void* codes, const float* x) {
    return T >= 1 && T <= kInt4LinearMaxRows && in > 0 && in % 32 == 0 && in < (int64_t(1) << 30) && group > 0 &&
           group % 8 == 0 && in % group == 0 && reinterpret_cast<uintptr_t>(codes) % 16 == 0 &&
           reinterpret_cast<uintptr_t>(x) % 16 == 0;
}

namespace {
template <w4::Code4 F>
void launch_4bit(const uint32_t* codes, const uint16_t* scales, int64_t out, int64_t in, int64_t group, float global,
                 const float* x, int64_t T, float* y, cudaStream_t stream, int rows_per_warp) {
    QS_CHECK_MSG(int4_linear_supports(T, in, group, codes, x), "launch_int4_linear: unsupported shape or alignment");
    QS_CHECK(out > 0 && out < (int64_t(1) << 31) && scales != nullptr);
    // Default: enough blocks to cover the SMs (132 on the H200) several times; untuned (lab).
    int rpw = rows_per_warp;
    if (rpw == 0) rpw = out >= 16384 ? 4 : out >= 4096 ? 2 : 1;
    QS_CHECK_MSG(rpw == 1 || rpw == 2 || rpw == 4, "launch_int4_linear: rows_per_warp must be 0, 1, 2 or 4");
    const int o = int(out), i = int(in), g = int(group), t = int(T);
    if (rpw == 1) launch_rpw<F, 1>(codes, scales, o, i, g, x, t, y, global, stream);
    else if (rpw == 2) launch_rpw<F, 2>(codes, scales, o, i, g, x, t, y, global, stream);
    else launch_rpw<F, 4>(codes, scales, o, i, g, x, t, y, global, stream);
}
}  // namespace

void launch_int4_linear(const uint32_t* codes, const uint16_t* scales, int64_t out, int64_t in, int64_t group,
                        const float* x, int64_t T, float* y, cudaStream_t stream, int rows_per_warp) {
    launch_4bit<w4::Code4::kInt4>(codes, scales, out, in, group, 1.0f, x, T, y, stream, rows_per_warp);
}

bool nvfp4_linear_supports(int64_t T, int64_t in, const void* codes, const float* x) {
    return int4_linear_supports(T, in, kNvfp4LinearGroup, codes, x);
}

void launch_nvfp4_linear(const uint32_t* codes, const uint16_t* scales, float global, int64_t out, int64_t in,
                         const float* x, int64_t T, float* y, cudaStream_t stream, int rows_per_warp) {
    launch_4bit<w4::Code4::kNvfp4>(codes, scales, out, in, kNvfp4LinearGroup, global, x, T, y, stream,
                                   rows_per_warp);
}

}  // namespace qs::cuda

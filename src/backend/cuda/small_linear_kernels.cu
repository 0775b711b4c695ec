// Small-T dense linears (see small_linear_kernels.h).
//
// Grid: ceil(out / 8) blocks of 8 warps; warp w of block b computes output feature o = 8b + w for
// all T rows. Lane l reads 16 bytes of W's row o at a time (8 bf16 or 16 fp8 values, inside one
// 128-column scale block since 16 divides 128), strided by 32 × 16 bytes over the row; for each
// row t it rounds x[t] at the same columns as the cuBLASLt path would (bf16; or e4m3 with the
// group's scale, the group's amax reduced over the 8 lanes that hold it) and accumulates the
// products, applying the weight block's scale per chunk. A shuffle reduction gives y[t, o].
#include "backend/cuda/small_linear_kernels.h"

#include <cuda_bf16.h>
#include <cuda_fp8.h>

#include "backend/cuda/cuda_check.h"
#include "core/check.h"

namespace qs::cuda {
namespace {

constexpr int kWarps = 8;

// The 16 bytes at `raw` as floats: 8 bf16 or 16 fp8 e4m3.
template <bool FP8>
__device__ __forceinline__ void unpack(const uint4& raw, float* f) {
    const uint32_t words[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        if constexpr (FP8) {
            __nv_fp8x2_e4m3 lo, hi;
            lo.__x = __nv_fp8x2_storage_t(words[i] & 0xffffu);
            hi.__x = __nv_fp8x2_storage_t(words[i] >> 16);
            const float2 a = static_cast<float2>(lo), b = static_cast<float2>(hi);
            f[4 * i] = a.x, f[4 * i + 1] = a.y, f[4 * i + 2] = b.x, f[4 * i + 3] = b.y;
        } else {
            f[2 * i] = __uint_as_float(words[i] << 16);
            f[2 * i + 1] = __uint_as_float(words[i] & 0xffff0000u);
        }
    }
}

template <bool FP8, int T>
__global__ __launch_bounds__(kWarps * 32) void small_linear_kernel(const uint8_t* __restrict__ w,
                                                                   const float* __restrict__ scale_inv, int out,
                                                                   int in, const float* __restrict__ x,
                                                                   float* __restrict__ y) {
    constexpr int V = FP8 ? 16 : 8;  // weights per 16-byte load
    const int lane = threadIdx.x & 31;
    const int o = blockIdx.x * kWarps + (threadIdx.x >> 5);
    if (o >= out) return;
    const size_t row_bytes = size_t(in) * (FP8 ? 1 : 2);
    const uint4* wr = reinterpret_cast<const uint4*>(w + size_t(o) * row_bytes);
    const int scale_ld = (in + 127) / 128;
    const float* srow = FP8 ? scale_inv + size_t(o / 128) * scale_ld : nullptr;
    float acc[T];
#pragma unroll
    for (int t = 0; t < T; ++t) acc[t] = 0.0f;
#pragma unroll 2
    for (int k0 = lane * V; k0 < in; k0 += 32 * V) {
        float wf[V];
        unpack<FP8>(__ldg(wr + k0 / V), wf);
        const float s = FP8 ? __ldg(srow + k0 / 128) : 1.0f;
#pragma unroll
        for (int t = 0; t < T; ++t) {
            const float4* xp = reinterpret_cast<const float4*>(x + size_t(t) * in + k0);
            float xv[V];
#pragma unroll
            for (int j = 0; j < V / 4; ++j) {
                const float4 f = __ldg(xp + j);
                xv[4 * j] = f.x, xv[4 * j + 1] = f.y, xv[4 * j + 2] = f.z, xv[4 * j + 3] = f.w;
            }
            float x_scale = 1.0f;
            if constexpr (FP8) {
                // The 128-column group of these 16 values is held by 8 consecutive lanes.
                float amax = 0.0f;
#pragma unroll
                for (int j = 0; j < V; ++j) amax = fmaxf(amax, fabsf(xv[j]));
#pragma unroll
                for (int off = 1; off < 8; off <<= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, off));
                x_scale = amax > 0.0f ? __fdiv_rn(amax, 448.0f) : 1.0f;  // launch_quant_fp8_rows128's ops
#pragma unroll
                for (int j = 0; j < V; ++j) {
                    __nv_fp8_e4m3 q;
                    q.__x = __nv_cvt_float_to_fp8(__fdiv_rn(xv[j], x_scale), __NV_SATFINITE, __NV_E4M3);
                    xv[j] = float(q);
                }
            } else {
#pragma unroll
                for (int j = 0; j < V; ++j) xv[j] = __bfloat162float(__float2bfloat16_rn(xv[j]));
            }
            float d = 0.0f;
#pragma unroll
            for (int j = 0; j < V; ++j) d = fmaf(wf[j], xv[j], d);
            acc[t] = fmaf(s * x_scale, d, acc[t]);
        }
    }
#pragma unroll
    for (int t = 0; t < T; ++t) {
        float v = acc[t];
#pragma unroll
        for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
        if (lane == 0) y[size_t(t) * out + o] = v;
    }
}

template <bool FP8>
void launch_for_rows(const uint8_t* w, const float* s, int out, int in, const float* x, int T, float* y,
                     cudaStream_t stream) {
    const dim3 grid((out + kWarps - 1) / kWarps), block(kWarps * 32);
    if (T == 1) small_linear_kernel<FP8, 1><<<grid, block, 0, stream>>>(w, s, out, in, x, y);
    else small_linear_kernel<FP8, 2><<<grid, block, 0, stream>>>(w, s, out, in, x, y);
    QS_CUDA_CHECK_LAUNCH();
}

}  // namespace

bool small_linear_supports(bool fp8, int64_t T, int64_t in, const void* w, const float* x) {
    // FP8 at 2 rows: the in-kernel quantisation of x makes it no faster than cuBLASLt's (lab).
    return T >= 1 && T <= (fp8 ? 1 : kSmallLinearMaxRows) && in > 0 && in % (fp8 ? 512 : 256) == 0 && in < (int64_t(1) << 30) &&
           reinterpret_cast<uintptr_t>(w) % 16 == 0 && reinterpret_cast<uintptr_t>(x) % 16 == 0;
}

void launch_small_linear(const void* w, bool fp8, const float* scale_inv, int64_t out, int64_t in, const float* x,
                         int64_t T, float* y, cudaStream_t stream) {
    QS_CHECK_MSG(small_linear_supports(fp8, T, in, w, x), "launch_small_linear: unsupported shape or alignment");
    QS_CHECK(out > 0 && out < (int64_t(1) << 31) && (!fp8 || scale_inv));
    const auto* wb = static_cast<const uint8_t*>(w);
    if (fp8) launch_for_rows<true>(wb, scale_inv, int(out), int(in), x, int(T), y, stream);
    else launch_for_rows<false>(wb, nullptr, int(out), int(in), x, int(T), y, stream);
}

}  // namespace qs::cuda

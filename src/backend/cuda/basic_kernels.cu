// Elementwise and row kernels (see basic_kernels.h). CPU references: backend/cpu/cpu_basic.cpp.
// Grid mapping: row kernels use one block per row (blockDim 256, strided over the row);
// elementwise kernels a grid-stride loop.
#include "backend/cuda/basic_kernels.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cmath>

#include "backend/cuda/cuda_check.h"
#include "core/check.h"

namespace qs::cuda {

namespace {

constexpr int kThreads = 256;

int grid_for(int64_t n) {
    const int64_t blocks = (n + kThreads - 1) / kThreads;
    return int(blocks < 4096 ? (blocks > 0 ? blocks : 1) : 4096);
}

__device__ float block_sum(float v) {
    __shared__ float warp_sums[32];
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if (lane == 0) warp_sums[warp] = v;
    __syncthreads();
    const int num_warps = (blockDim.x + 31) >> 5;
    v = lane < num_warps ? warp_sums[lane] : 0.0f;
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    __syncthreads();  // warp_sums may be reused by a following call
    return v;
}

__global__ void embed_kernel(const void* table, TableDtype dtype, const int32_t* ids, int64_t H, float* x) {
    const int64_t t = blockIdx.x;
    const int64_t row = ids[t];
    float* out = x + t * H;
    for (int64_t i = threadIdx.x; i < H; i += blockDim.x) {
        const int64_t k = row * H + i;
        float v;
        if (dtype == TableDtype::kBF16) v = __bfloat162float(static_cast<const __nv_bfloat16*>(table)[k]);
        else if (dtype == TableDtype::kF16) v = __half2float(static_cast<const __half*>(table)[k]);
        else v = static_cast<const float*>(table)[k];
        out[i] = v;
    }
}

__global__ void rms_norm_zc_kernel(const float* x, const float* w, int64_t n, float eps, float* y) {
    const float* xr = x + int64_t(blockIdx.x) * n;
    float* yr = y + int64_t(blockIdx.x) * n;
    float ss = 0.0f;
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) ss += xr[i] * xr[i];
    const float inv = rsqrtf(block_sum(ss) / float(n) + eps);
    // Every read of x precedes the block_sum barrier, so y may alias x.
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) yr[i] = xr[i] * inv * (1.0f + w[i]);
}

__global__ void add_kernel(float* x, const float* y, int64_t n) {
    for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
        x[i] += y[i];
}

__global__ void gather_rows_kernel(const float* src, const int32_t* rows, int64_t n, float* out) {
    const float* s = src + int64_t(rows[blockIdx.x]) * n;
    float* o = out + int64_t(blockIdx.x) * n;
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) o[i] = s[i];
}

__global__ void concat_columns_kernel(const float* a, const float* b, int64_t n, float* out) {
    const int64_t t = blockIdx.x;
    for (int64_t i = threadIdx.x; i < 2 * n; i += blockDim.x) out[t * 2 * n + i] = i < n ? a[t * n + i] : b[t * n + i - n];
}

__global__ void f32_to_bf16_kernel(const float* src, int64_t n, __nv_bfloat16* dst) {
    for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
        dst[i] = __float2bfloat16_rn(src[i]);
}

__global__ void dequant_fp8_block_kernel(const __nv_fp8_e4m3* src, const float* scale_inv, int64_t rows, int64_t cols,
                                         __nv_bfloat16* dst) {
    const int64_t scale_cols = (cols + 127) / 128, n = rows * cols;
    for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
        const int64_t r = i / cols, c = i % cols;
        dst[i] = __float2bfloat16_rn(float(src[i]) * scale_inv[(r / 128) * scale_cols + c / 128]);
    }
}

// One warp per (row, 128-column group): 4 consecutive columns per lane (one 16-byte load, one
// 4-byte store of codes), amax by butterfly shuffles. Groups are numbered row-major.
__global__ void quant_fp8_rows128_kernel(const float* x, int64_t T, int64_t K, int64_t T_pad, uint8_t* q,
                                         float* scales) {
    const int64_t num_groups = K / 128;
    const int64_t group = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
    const int lane = threadIdx.x & 31;
    if (group >= T_pad * num_groups) return;
    const int64_t t = group / num_groups, g = group % num_groups;
    uint32_t* qw = reinterpret_cast<uint32_t*>(q + t * K + g * 128) + lane;
    if (t >= T) {
        *qw = 0u;
        if (lane == 0) scales[g * T_pad + t] = 1.0f;
        return;
    }
    const float4 v = reinterpret_cast<const float4*>(x + t * K + g * 128)[lane];
    float amax = fmaxf(fmaxf(fabsf(v.x), fabsf(v.y)), fmaxf(fabsf(v.z), fabsf(v.w)));
    for (int o = 16; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
    const float scale = amax > 0.0f ? __fdiv_rn(amax, 448.0f) : 1.0f;
    const __nv_fp8x2_storage_t lo = __nv_cvt_float2_to_fp8x2(
        make_float2(__fdiv_rn(v.x, scale), __fdiv_rn(v.y, scale)), __NV_SATFINITE, __NV_E4M3);
    const __nv_fp8x2_storage_t hi = __nv_cvt_float2_to_fp8x2(
        make_float2(__fdiv_rn(v.z, scale), __fdiv_rn(v.w, scale)), __NV_SATFINITE, __NV_E4M3);
    *qw = uint32_t(lo) | (uint32_t(hi) << 16);
    if (lane == 0) scales[g * T_pad + t] = scale;
}

__global__ void bf16_to_f32_kernel(const __nv_bfloat16* src, int64_t n, float* dst) {
    for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
        dst[i] = __bfloat162float(src[i]);
}

__global__ void argmax_rows_kernel(const float* x, int64_t n, int32_t* out) {
    const float* row = x + int64_t(blockIdx.x) * n;
    float best = -INFINITY;
    int64_t best_i = n;  // n: nothing seen yet (all NaN or -inf rows resolve to index 0 below)
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
        const float v = row[i];
        if (!(v != v) && (best_i == n || v > best)) best = v, best_i = i;  // ascending i: first max wins
    }
    __shared__ float sv[kThreads];
    __shared__ int64_t si[kThreads];
    sv[threadIdx.x] = best;
    si[threadIdx.x] = best_i;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) {
            const float ov = sv[threadIdx.x + s];
            const int64_t oi = si[threadIdx.x + s];
            if (oi != n && (si[threadIdx.x] == n || ov > sv[threadIdx.x] || (ov == sv[threadIdx.x] && oi < si[threadIdx.x])))
                sv[threadIdx.x] = ov, si[threadIdx.x] = oi;
        }
        __syncthreads();
    }
    if (threadIdx.x == 0) out[blockIdx.x] = int32_t(si[0] == n ? 0 : si[0]);
}

__global__ void fill_nan_kernel(float* x, int64_t n) {
    for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
        x[i] = NAN;
}

}  // namespace

void launch_embed(const void* table, TableDtype dtype, const int32_t* ids, int64_t T, int64_t H, float* x,
                  cudaStream_t stream) {
    if (T == 0) return;
    embed_kernel<<<unsigned(T), kThreads, 0, stream>>>(table, dtype, ids, H, x);
    QS_CUDA_CHECK_LAUNCH();
}

void launch_rms_norm_zc(const float* x, const float* w, int64_t T, int64_t n, float eps, float* y, cudaStream_t stream) {
    if (T == 0) return;
    rms_norm_zc_kernel<<<unsigned(T), kThreads, 0, stream>>>(x, w, n, eps, y);
    QS_CUDA_CHECK_LAUNCH();
}

void launch_add(float* x, const float* y, int64_t n, cudaStream_t stream) {
    if (n == 0) return;
    add_kernel<<<grid_for(n), kThreads, 0, stream>>>(x, y, n);
    QS_CUDA_CHECK_LAUNCH();
}

void launch_gather_rows(const float* src, const int32_t* rows, int64_t R, int64_t n, float* out, cudaStream_t stream) {
    if (R == 0) return;
    gather_rows_kernel<<<unsigned(R), kThreads, 0, stream>>>(src, rows, n, out);
    QS_CUDA_CHECK_LAUNCH();
}

void launch_concat_columns(const float* a, const float* b, int64_t T, int64_t n, float* out, cudaStream_t stream) {
    if (T == 0) return;
    concat_columns_kernel<<<unsigned(T), kThreads, 0, stream>>>(a, b, n, out);
    QS_CUDA_CHECK_LAUNCH();
}

void launch_f32_to_bf16(const float* src, int64_t n, uint16_t* dst, cudaStream_t stream) {
    if (n == 0) return;
    f32_to_bf16_kernel<<<grid_for(n), kThreads, 0, stream>>>(src, n, reinterpret_cast<__nv_bfloat16*>(dst));
    QS_CUDA_CHECK_LAUNCH();
}

void launch_dequant_fp8_block(const uint8_t* src, const float* scale_inv, int64_t rows, int64_t cols, uint16_t* dst,
                              cudaStream_t stream) {
    if (rows * cols == 0) return;
    dequant_fp8_block_kernel<<<grid_for(rows * cols), kThreads, 0, stream>>>(
        reinterpret_cast<const __nv_fp8_e4m3*>(src), scale_inv, rows, cols, reinterpret_cast<__nv_bfloat16*>(dst));
    QS_CUDA_CHECK_LAUNCH();
}

void launch_quant_fp8_rows128(const float* x, int64_t T, int64_t K, int64_t T_pad, uint8_t* q, float* scales,
                              cudaStream_t stream) {
    QS_CHECK_MSG(K % 128 == 0 && T_pad >= T && T_pad % 4 == 0, "launch_quant_fp8_rows128: bad shape");
    const int64_t warps = T_pad * (K / 128);
    if (warps == 0) return;
    constexpr int64_t kWarpsPerBlock = kThreads / 32;
    quant_fp8_rows128_kernel<<<unsigned((warps + kWarpsPerBlock - 1) / kWarpsPerBlock), kThreads, 0, stream>>>(
        x, T, K, T_pad, q, scales);
    QS_CUDA_CHECK_LAUNCH();
}

void launch_bf16_to_f32(const uint16_t* src, int64_t n, float* dst, cudaStream_t stream) {
    if (n == 0) return;
    bf16_to_f32_kernel<<<grid_for(n), kThreads, 0, stream>>>(reinterpret_cast<const __nv_bfloat16*>(src), n, dst);
    QS_CUDA_CHECK_LAUNCH();
}

void launch_argmax_rows(const float* x, int64_t R, int64_t n, int32_t* out, cudaStream_t stream) {
    if (R == 0) return;
    argmax_rows_kernel<<<unsigned(R), kThreads, 0, stream>>>(x, n, out);
    QS_CUDA_CHECK_LAUNCH();
}

void launch_fill_nan(float* x, int64_t n, cudaStream_t stream) {
    if (n == 0) return;
    fill_nan_kernel<<<grid_for(n), kThreads, 0, stream>>>(x, n);
    QS_CUDA_CHECK_LAUNCH();
}

}  // namespace qs::cuda

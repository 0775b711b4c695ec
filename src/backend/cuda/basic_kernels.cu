// Elementwise and row kernels (see basic_kernels.h). CPU references: backend/cpu/cpu_basic.cpp.
// Grid mapping: row kernels use one block per row (blockDim 256, strided over the row);
// elementwise kernels a grid-stride loop.
#include "backend/cuda/basic_kernels.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <algorithm>
#include <cmath>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/row_norm.cuh"
#include "core/check.h"

namespace qs::cuda {

namespace {

constexpr int kThreads = 256;

int grid_for(int64_t n) {
    const int64_t blocks = (n + kThreads - 1) / kThreads;
    return int(blocks < 4096 ? (blocks > 0 ? blocks : 1) : 4096);
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
    const float inv = rms_inv(block_sum(ss), n, eps);
    // Every read of x precedes the block_sum barrier, so y may alias x.
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) yr[i] = norm_zc(xr[i], inv, w[i]);
}

// Where the norm kernel also writes its output's FP8 quantisation for the block-scaled GEMM
// (launch_residual_rms_norm_quant): codes [T_pad, n], scales [n/128, T_pad], as
// launch_quant_fp8_rows128 lays them out; q null: no quantisation.
struct NormQuantOut {
    uint8_t* q = nullptr;
    float* scales = nullptr;
    int64_t T = 0, T_pad = 0;
};

// One block per row; each thread keeps its kPer sums x + y1 (+ y2) in registers between the add and
// the norm, so the row is read once and the sum and out are written once (add_kernel then
// rms_norm_zc_kernel read it three times and write it twice). Thread i owns elements i,
// i + blockDim, ... as in rms_norm_zc_kernel, so the sum of squares runs in the same order and the
// results are the same bits (row_norm.cuh). y1, y2 and x_out may be null (no addend; the sum not
// kept); x_out may equal x, and out may equal x when x_out is null.
// kQuant: out quantised as well, in registers, with quant_fp8_rows128_kernel's operations (scale =
// amax/448 of the 128-column group, codes of out/scale correctly rounded, satfinite), so the codes
// and scales are that kernel's bits and its pass over out (read 4 bytes, write 1 per element) is
// saved. At 256 threads round k's 256 columns are two groups, warps 0-3 and 4-7: each warp's amax
// goes through shared memory (max is exact in any order). Blocks past T write the padding rows
// (zero codes, scale 1).
template <int kPer, bool kQuant>
__global__ void __launch_bounds__(kThreads) add_rms_norm_zc_kernel(const float* x, const float* y1, const float* y2,
                                                                  float* x_out, const float* w, int64_t n, float eps,
                                                                  float* out, NormQuantOut qo) {
    if constexpr (kQuant) {
        if (int64_t(blockIdx.x) >= qo.T) {
            uint8_t* qr = qo.q + int64_t(blockIdx.x) * n;
            for (int64_t i = threadIdx.x; i < n; i += blockDim.x) qr[i] = 0;
            for (int64_t g = threadIdx.x; g < n / 128; g += blockDim.x) qo.scales[g * qo.T_pad + blockIdx.x] = 1.0f;
            return;
        }
    }
    const int64_t row = int64_t(blockIdx.x) * n;
    float v[kPer], wv[kPer];
    float ss = 0.0f;
#pragma unroll
    for (int k = 0; k < kPer; ++k) {
        const int64_t i = threadIdx.x + int64_t(k) * blockDim.x;
        v[k] = 0.0f;
        if (i < n) {
            v[k] = x[row + i];
            if (y1 != nullptr) v[k] = v[k] + y1[row + i];
            if (y2 != nullptr) v[k] = v[k] + y2[row + i];
        }
        wv[k] = i < n ? w[i] : 0.0f;  // loaded with x and y: not a second round trip after the barrier
        if (i < n) ss += v[k] * v[k];
    }
    const float inv = rms_inv(block_sum(ss), n, eps);
#pragma unroll
    for (int k = 0; k < kPer; ++k) {
        const int64_t i = threadIdx.x + int64_t(k) * blockDim.x;
        if (i >= n) continue;
        if (x_out != nullptr) x_out[row + i] = v[k];
        v[k] = norm_zc(v[k], inv, wv[k]);
        out[row + i] = v[k];
    }
    if constexpr (kQuant) {
        __shared__ float s_amax[kPer][kThreads / 32];
        const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
        for (int k = 0; k < kPer; ++k) {
            const int64_t i = threadIdx.x + int64_t(k) * blockDim.x;
            float a = i < n ? fabsf(v[k]) : 0.0f;
            for (int o = 16; o > 0; o >>= 1) a = fmaxf(a, __shfl_xor_sync(0xffffffffu, a, o));
            if (lane == 0) s_amax[k][warp] = a;
        }
        __syncthreads();
        const int w0 = (threadIdx.x >> 7) * 4;  // the four warps of this thread's group
#pragma unroll
        for (int k = 0; k < kPer; ++k) {
            const int64_t i = threadIdx.x + int64_t(k) * blockDim.x;
            if (i >= n) continue;
            const float amax = fmaxf(fmaxf(s_amax[k][w0], s_amax[k][w0 + 1]), fmaxf(s_amax[k][w0 + 2], s_amax[k][w0 + 3]));
            const float scale = amax > 0.0f ? __fdiv_rn(amax, 448.0f) : 1.0f;
            qo.q[row + i] = __nv_cvt_float_to_fp8(__fdiv_rn(v[k], scale), __NV_SATFINITE, __NV_E4M3);
            if ((i & 127) == 0) qo.scales[(i >> 7) * qo.T_pad + blockIdx.x] = scale;
        }
    }
}

__global__ void add_kernel(float* x, const float* y, int64_t n) {
    for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
        x[i] += y[i];
}

// Row r of out [R, n] = row rows[r] of src [*, n], by the block of r.
__device__ void gather_row(const float* src, const int32_t* rows, int64_t n, float* out, unsigned r) {
    const float* s = src + int64_t(rows[r]) * n;
    float* o = out + int64_t(r) * n;
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) o[i] = s[i];
}

__global__ void gather_rows_kernel(const float* src, const int32_t* rows, int64_t n, float* out) {
    gather_row(src, rows, n, out, blockIdx.x);
}

struct Gather3Args {
    GatherRowsPart part[3];
};

// Block (r, i): row r of part i.
__global__ void gather_rows3_kernel(Gather3Args a, const int32_t* rows) {
    const GatherRowsPart& g = a.part[blockIdx.y];
    gather_row(g.src, rows, g.n, g.out, blockIdx.x);
}

// 16 KB a block: four float4 loads in flight per thread.
constexpr int kCopyChunk = 4 * kThreads;  // float4s

struct Copy3Args {
    GatherRowsPart part[3];
    int64_t first_block[3];  // part i's blocks start at first_block[i]
};

__global__ void copy3_kernel(Copy3Args a) {
    const int p = int(blockIdx.x) >= a.first_block[2] ? 2 : int(blockIdx.x) >= a.first_block[1] ? 1 : 0;
    const GatherRowsPart& g = a.part[p];
    const int64_t n4 = g.n / 4, base = (int64_t(blockIdx.x) - a.first_block[p]) * kCopyChunk + threadIdx.x;
    const float4* s = reinterpret_cast<const float4*>(g.src);
    float4* o = reinterpret_cast<float4*>(g.out);
    float4 v[4];
#pragma unroll
    for (int u = 0; u < 4; ++u) {
        const int64_t i = base + int64_t(u) * kThreads;
        if (i < n4) v[u] = s[i];
    }
#pragma unroll
    for (int u = 0; u < 4; ++u) {
        const int64_t i = base + int64_t(u) * kThreads;
        if (i < n4) o[i] = v[u];
    }
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

// The better of two (value, index) candidates: the larger value, the lower index on ties; index
// `none` is no candidate (NaN and nothing-seen never win).
__device__ __forceinline__ void argmax_merge(float& v, int64_t& i, float ov, int64_t oi, int64_t none) {
    if (oi != none && (i == none || ov > v || (ov == v && oi < i))) v = ov, i = oi;
}

// Block reduction of every thread's candidate; thread 0 gets the block's.
__device__ __forceinline__ void argmax_block(float& best, int64_t& best_i, int64_t none) {
    __shared__ float sv[kThreads];
    __shared__ int64_t si[kThreads];
    sv[threadIdx.x] = best;
    si[threadIdx.x] = best_i;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) {
            float v = sv[threadIdx.x];
            int64_t i = si[threadIdx.x];
            argmax_merge(v, i, sv[threadIdx.x + s], si[threadIdx.x + s], none);
            sv[threadIdx.x] = v, si[threadIdx.x] = i;
        }
        __syncthreads();
    }
    best = sv[0];
    best_i = si[0];
}

// Block (c, r) scans columns [c·chunk, min(n, (c+1)·chunk)) of row r. With one chunk per row it
// writes the row's id into out; otherwise its candidate into part_v / part_i [R, gridDim.x]
// (argmax_rows_finish_kernel reduces them). Several blocks per row: one block alone issues too
// few loads at a time to stream a 248k-entry vocabulary row (the MTP draft argmax of one row).
__global__ void argmax_rows_kernel(const float* x, int64_t n, int64_t chunk, int32_t* out, float* part_v,
                                   int64_t* part_i) {
    const float* row = x + int64_t(blockIdx.y) * n;
    const int64_t begin = int64_t(blockIdx.x) * chunk, end = min(n, begin + chunk);
    float best = -INFINITY;
    int64_t best_i = n;  // n: nothing seen yet (all NaN or -inf rows resolve to index 0 below)
#pragma unroll 4
    for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) {
        const float v = row[i];
        if (!(v != v) && (best_i == n || v > best)) best = v, best_i = i;  // ascending i: first max wins
    }
    argmax_block(best, best_i, n);
    if (threadIdx.x != 0) return;
    if (gridDim.x == 1) {
        out[blockIdx.y] = int32_t(best_i == n ? 0 : best_i);
    } else {
        part_v[int64_t(blockIdx.y) * gridDim.x + blockIdx.x] = best;
        part_i[int64_t(blockIdx.y) * gridDim.x + blockIdx.x] = best_i;
    }
}

__global__ void argmax_rows_finish_kernel(const float* part_v, const int64_t* part_i, int chunks, int64_t n,
                                          int32_t* out) {
    float best = -INFINITY;
    int64_t best_i = n;
    for (int c = threadIdx.x; c < chunks; c += blockDim.x)
        argmax_merge(best, best_i, part_v[int64_t(blockIdx.x) * chunks + c], part_i[int64_t(blockIdx.x) * chunks + c], n);
    argmax_block(best, best_i, n);
    if (threadIdx.x == 0) out[blockIdx.x] = int32_t(best_i == n ? 0 : best_i);
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

// add_rms_norm_zc_kernel over `blocks` rows, its row width instantiated for n.
template <bool kQuant>
void launch_add_rms_norm_rows(int64_t blocks, const float* x, const float* y1, const float* y2, float* x_out,
                              const float* w, int64_t n, float eps, float* out, const NormQuantOut& qo,
                              cudaStream_t stream) {
    static_assert(kAddRmsNormMaxCols == 16 * kThreads, "the widest instantiation below covers kAddRmsNormMaxCols");
    const unsigned grid = unsigned(blocks);
    if (n <= 2 * kThreads) add_rms_norm_zc_kernel<2, kQuant><<<grid, kThreads, 0, stream>>>(x, y1, y2, x_out, w, n, eps, out, qo);
    else if (n <= 8 * kThreads) add_rms_norm_zc_kernel<8, kQuant><<<grid, kThreads, 0, stream>>>(x, y1, y2, x_out, w, n, eps, out, qo);
    else add_rms_norm_zc_kernel<16, kQuant><<<grid, kThreads, 0, stream>>>(x, y1, y2, x_out, w, n, eps, out, qo);
    QS_CUDA_CHECK_LAUNCH();
}

void launch_residual_rms_norm_zc(const float* x, const float* y1, const float* y2, float* x_out, const float* w,
                                 int64_t T, int64_t n, float eps, float* out, cudaStream_t stream) {
    if (T == 0) return;
    QS_CHECK_MSG(n >= 1 && n <= kAddRmsNormMaxCols, "launch_residual_rms_norm_zc: rows of 1 to 4,096 columns");
    launch_add_rms_norm_rows<false>(T, x, y1, y2, x_out, w, n, eps, out, NormQuantOut{}, stream);
}

void launch_residual_rms_norm_quant(const float* x, const float* y1, const float* y2, float* x_out, const float* w,
                                    int64_t T, int64_t n, float eps, float* out, int64_t T_pad, uint8_t* q,
                                    float* scales, cudaStream_t stream) {
    if (T == 0) return;
    QS_CHECK_MSG(n >= 128 && n <= kAddRmsNormMaxCols && n % 128 == 0 && T_pad >= T && T_pad % 4 == 0 && q && scales,
                 "launch_residual_rms_norm_quant: rows of 128 to 4,096 columns in whole groups of 128, T_pad >= T "
                 "a multiple of 4");
    // T_pad blocks: those past T write the padding rows.
    launch_add_rms_norm_rows<true>(T_pad, x, y1, y2, x_out, w, n, eps, out, NormQuantOut{q, scales, T, T_pad}, stream);
}

void launch_add_rms_norm_zc(float* x, const float* y, const float* w, int64_t T, int64_t n, float eps, float* out,
                            cudaStream_t stream) {
    if (T == 0) return;
    if (n > kAddRmsNormMaxCols) {
        launch_add(x, y, T * n, stream);
        launch_rms_norm_zc(x, w, T, n, eps, out, stream);
        return;
    }
    // In place (out == x, the final norm): only the normalised rows are wanted.
    launch_residual_rms_norm_zc(x, y, nullptr, out == x ? nullptr : x, w, T, n, eps, out, stream);
}

void launch_gather_rows(const float* src, const int32_t* rows, int64_t R, int64_t n, float* out, cudaStream_t stream) {
    if (R == 0) return;
    gather_rows_kernel<<<unsigned(R), kThreads, 0, stream>>>(src, rows, n, out);
    QS_CUDA_CHECK_LAUNCH();
}

void launch_gather_rows3(const GatherRowsPart (&parts)[3], const int32_t* rows, int64_t R, cudaStream_t stream) {
    if (R == 0) return;
    Gather3Args a;
    for (int i = 0; i < 3; ++i) a.part[i] = parts[i];
    gather_rows3_kernel<<<dim3(unsigned(R), 3), kThreads, 0, stream>>>(a, rows);
    QS_CUDA_CHECK_LAUNCH();
}

bool copy3_supported(const GatherRowsPart (&parts)[3]) {
    for (const GatherRowsPart& g : parts) {
        if (g.n == 0) continue;
        if (g.n % 4 != 0 || reinterpret_cast<uintptr_t>(g.src) % 16 != 0 || reinterpret_cast<uintptr_t>(g.out) % 16 != 0)
            return false;
    }
    return true;
}

void launch_copy3(const GatherRowsPart (&parts)[3], cudaStream_t stream) {
    QS_CHECK_MSG(copy3_supported(parts), "launch_copy3: parts must be 16-byte aligned with n % 4 == 0");
    Copy3Args a;
    int64_t blocks = 0;
    for (int i = 0; i < 3; ++i) {
        a.part[i] = parts[i];
        a.first_block[i] = blocks;
        blocks += (parts[i].n / 4 + kCopyChunk - 1) / kCopyChunk;
    }
    if (blocks == 0) return;
    QS_CHECK(blocks < (int64_t(1) << 31));
    copy3_kernel<<<unsigned(blocks), kThreads, 0, stream>>>(a);
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

namespace {
// Chunks per row: enough blocks for the GPU (~2 per SM of an H200) when there are few rows, no
// chunk under kArgmaxMinChunk columns; many rows keep one block each (no second pass).
constexpr int64_t kArgmaxTargetBlocks = 264, kArgmaxMinChunk = 4096, kArgmaxMaxChunks = 64;
int64_t argmax_chunks(int64_t R, int64_t n) {
    if (R <= 0 || R >= kArgmaxTargetBlocks) return 1;
    const int64_t by_size = (n + kArgmaxMinChunk - 1) / kArgmaxMinChunk;
    const int64_t by_rows = (kArgmaxTargetBlocks + R - 1) / R;
    return std::max<int64_t>(1, std::min({by_size, by_rows, kArgmaxMaxChunks}));
}
}  // namespace

size_t argmax_rows_workspace_bytes(int64_t R, int64_t n) {
    const int64_t chunks = argmax_chunks(R, n);
    return chunks == 1 ? 0 : size_t(R * chunks) * (sizeof(float) + sizeof(int64_t));
}

void launch_argmax_rows(const float* x, int64_t R, int64_t n, int32_t* out, void* workspace, cudaStream_t stream) {
    if (R == 0) return;
    const int64_t chunks = argmax_chunks(R, n);
    const int64_t chunk = (n + chunks - 1) / chunks;
    // int64 candidates first (8-byte aligned in the workspace), then the values.
    auto* part_i = static_cast<int64_t*>(workspace);
    auto* part_v = chunks == 1 ? nullptr : reinterpret_cast<float*>(part_i + R * chunks);
    argmax_rows_kernel<<<dim3(unsigned(chunks), unsigned(R)), kThreads, 0, stream>>>(x, n, chunk, out, part_v, part_i);
    QS_CUDA_CHECK_LAUNCH();
    if (chunks == 1) return;
    argmax_rows_finish_kernel<<<unsigned(R), kThreads, 0, stream>>>(part_v, part_i, int(chunks), n, out);
    QS_CUDA_CHECK_LAUNCH();
}

void launch_fill_nan(float* x, int64_t n, cudaStream_t stream) {
    if (n == 0) return;
    fill_nan_kernel<<<grid_for(n), kThreads, 0, stream>>>(x, n);
    QS_CUDA_CHECK_LAUNCH();
}

}  // namespace qs::cuda

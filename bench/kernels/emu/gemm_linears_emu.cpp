// Host check of Gemm::linears' control flow (src/backend/cuda/gemm.cpp, issue 14 item 4) without
// a GPU: the real gemm.cpp and device_memory.cpp (DeviceArena) linked against host stand-ins for
// the CUDA runtime (cudaMalloc = malloc, copies = memcpy), for cuBLASLt (descriptors kept as
// structs; cublasLtMatmul computes the product on the host from what the descriptors say: FP8 with
// BLK128x128 weight scales and VEC128 activation scales, bf16, fp32; a heuristic that can be told
// to refuse an FP8 shape, and a matmul that can be told to fail once) and for the kernels gemm.cpp
// launches (basic_kernels.h, small_linear_kernels.h, int4_linear_kernels.h: host loops, the
// activation quantisation exactly as quant_fp8_rows128_kernel does it). "Device" memory is host
// memory, so a shared operand that is released and overwritten before its last GEMM, a wrong
// scale pointer or a skipped quantisation changes the bits.
// Cases: groups of weights on one x (FP8 block with fp32 b/a-style weights (one small-rows fp32
// launch for all of them up to 8 rows, one tiled fp32 launch above with the tiles on), BF16 with fp32, BF16
// with INT4 codes), T from 1 to 130 (small-rows, padded and unpadded rows), every LinearPolicy,
// fp8_small_rows 0 and 4, FP8 plans refused for the first weight (the shared operand it made is
// released and remade by the next) or a later one (dequant fallback), and a matmul failing once.
// Checks: each output of one linears() call bitwise equal to a separate linear() on another Gemm;
// the same path counters on both; one quantisation / bf16 copy per call where shared
// (shared_input_reuses and the host launch counters); outputs near a double-precision product.
// Gemm::norm_linears (the layer's input norm with its projections): fused and unfused give the same h
// and outputs, the norm riding on the first FP8 small-rows launch exactly where one applies; and
// Gemm::linear_norm (the output projection with the post-attention norm) likewise for y, x and h.
// Run: sh bench/kernels/emu/run_emu.sh gemm_linears   (exit code 1 on any FAIL)
#include <cublasLt.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <random>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "backend/cuda/basic_kernels.h"
#include "backend/cuda/device_memory.h"
#include "backend/cuda/gemm.h"
#include "backend/cuda/int4_linear_kernels.h"
#include "backend/cuda/small_linear_kernels.h"
#include "core/dtype.h"
#include "core/log.h"

// ---------------------------------------------------------------- host stand-ins: logging, CUDA
namespace qs {
LogLevel log_level() { return LogLevel::kWarn; }
void log_line(LogLevel, std::string_view text) { std::fprintf(stderr, "%.*s\n", int(text.size()), text.data()); }
}  // namespace qs

extern "C" {
cudaError_t cudaMalloc(void** p, size_t bytes) {
    *p = std::aligned_alloc(256, (bytes + 255) / 256 * 256);
    // NaN in every float type: unwritten memory poisons results (not the cuBLASLt workspace).
    if (*p && bytes <= (size_t(32) << 20)) std::memset(*p, 0xff, bytes);
    return *p ? cudaSuccess : cudaErrorMemoryAllocation;
}
cudaError_t cudaFree(void* p) {
    std::free(p);
    return cudaSuccess;
}
cudaError_t cudaMemGetInfo(size_t* free_b, size_t* total_b) {
    *free_b = *total_b = 0;
    return cudaSuccess;
}
cudaError_t cudaGetLastError() { return cudaSuccess; }
const char* cudaGetErrorName(cudaError_t) { return "emu"; }
const char* cudaGetErrorString(cudaError_t) { return "emu"; }
cudaError_t cudaGetDevice(int* d) {
    *d = 0;
    return cudaSuccess;
}
cudaError_t cudaDeviceGetAttribute(int* v, cudaDeviceAttr, int) {
    *v = 132;
    return cudaSuccess;
}
cudaError_t cudaGetDeviceProperties(cudaDeviceProp* prop, int) {
    std::memset(prop, 0, sizeof(*prop));
    prop->major = 9;
    return cudaSuccess;
}
cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind, cudaStream_t) {
    std::memmove(dst, src, bytes);
    return cudaSuccess;
}
}

// ---------------------------------------------------------------- host stand-in: cuBLASLt
namespace {
struct Desc {
    cublasOperation_t ta = CUBLAS_OP_N, tb = CUBLAS_OP_N;
    int32_t a_mode = -1, b_mode = -1;
    const float* a_scale = nullptr;
    const float* b_scale = nullptr;
};
struct Layout {
    cudaDataType_t type;
    uint64_t rows, cols;
    int64_t ld;
};
std::set<int64_t> g_refuse_fp8_m;  // FP8 plans the heuristic refuses, by m (= out)
int64_t g_fail_fp8_matmul_m = -1;  // an FP8 matmul at this m fails once
int64_t g_matmuls = 0;

float bf16_value(const void* p, size_t i) { return qs::bf16_to_f32(qs::bf16{static_cast<const uint16_t*>(p)[i]}); }
float fp8_value(const void* p, size_t i) { return qs::fp8e4m3_to_f32(qs::fp8e4m3{static_cast<const uint8_t*>(p)[i]}); }
}  // namespace

extern "C" {
size_t cublasLtGetVersion() { return 130100; }
cublasStatus_t cublasLtCreate(cublasLtHandle_t* h) {
    static int handle;
    *h = reinterpret_cast<cublasLtHandle_t>(&handle);
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtDestroy(cublasLtHandle_t) { return CUBLAS_STATUS_SUCCESS; }
cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t* d, cublasComputeType_t, cudaDataType_t) {
    *d = reinterpret_cast<cublasLtMatmulDesc_t>(new Desc);
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t d) {
    delete reinterpret_cast<Desc*>(d);
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t attr,
                                              const void* buf, size_t bytes) {
    Desc& s = *reinterpret_cast<Desc*>(d);
    switch (attr) {
        case CUBLASLT_MATMUL_DESC_TRANSA: std::memcpy(&s.ta, buf, bytes); break;
        case CUBLASLT_MATMUL_DESC_TRANSB: std::memcpy(&s.tb, buf, bytes); break;
        case CUBLASLT_MATMUL_DESC_A_SCALE_MODE: std::memcpy(&s.a_mode, buf, bytes); break;
        case CUBLASLT_MATMUL_DESC_B_SCALE_MODE: std::memcpy(&s.b_mode, buf, bytes); break;
        case CUBLASLT_MATMUL_DESC_A_SCALE_POINTER: std::memcpy(&s.a_scale, buf, bytes); break;
        case CUBLASLT_MATMUL_DESC_B_SCALE_POINTER: std::memcpy(&s.b_scale, buf, bytes); break;
        default: return CUBLAS_STATUS_NOT_SUPPORTED;
    }
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t* l, cudaDataType type, uint64_t rows, uint64_t cols,
                                          int64_t ld) {
    *l = reinterpret_cast<cublasLtMatrixLayout_t>(new Layout{type, rows, cols, ld});
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t l) {
    delete reinterpret_cast<Layout*>(l);
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t* p) {
    static int pref;
    *p = reinterpret_cast<cublasLtMatmulPreference_t>(&pref);
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t) { return CUBLAS_STATUS_SUCCESS; }
cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t, cublasLtMatmulPreferenceAttributes_t,
                                                    const void*, size_t) {
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t, cublasLtMatmulDesc_t, cublasLtMatrixLayout_t a,
                                              cublasLtMatrixLayout_t, cublasLtMatrixLayout_t, cublasLtMatrixLayout_t,
                                              cublasLtMatmulPreference_t, int, cublasLtMatmulHeuristicResult_t* r,
                                              int* found) {
    const Layout& la = *reinterpret_cast<Layout*>(a);
    std::memset(r, 0, sizeof(*r));
    *found = la.type == CUDA_R_8F_E4M3 && g_refuse_fp8_m.count(int64_t(la.cols)) ? 0 : 1;
    return CUBLAS_STATUS_SUCCESS;
}
// D [m, n] (ld m) = op(A)ᵀ-view [m, k] · B [k, n], A stored [k, m] (ld k) as gemm.cpp lays it out.
cublasStatus_t cublasLtMatmul(cublasLtHandle_t, cublasLtMatmulDesc_t desc, const void* alpha, const void* A,
                              cublasLtMatrixLayout_t adesc, const void* B, cublasLtMatrixLayout_t bdesc, const void* beta,
                              const void*, cublasLtMatrixLayout_t, void* D, cublasLtMatrixLayout_t ddesc,
                              const cublasLtMatmulAlgo_t*, void*, size_t, cudaStream_t) {
    const Desc& s = *reinterpret_cast<Desc*>(desc);
    const Layout &la = *reinterpret_cast<Layout*>(adesc), &lb = *reinterpret_cast<Layout*>(bdesc),
                 &ld = *reinterpret_cast<Layout*>(ddesc);
    const int64_t k = int64_t(la.rows), m = int64_t(la.cols), n = int64_t(lb.cols);
    if (s.ta != CUBLAS_OP_T || s.tb != CUBLAS_OP_N || int64_t(lb.rows) != k || int64_t(ld.rows) != m ||
        int64_t(ld.cols) != n || *static_cast<const float*>(alpha) != 1.0f || *static_cast<const float*>(beta) != 0.0f)
        return CUBLAS_STATUS_INVALID_VALUE;
    if (la.type == CUDA_R_8F_E4M3 && m == g_fail_fp8_matmul_m) {
        g_fail_fp8_matmul_m = -1;
        return CUBLAS_STATUS_EXECUTION_FAILED;
    }
    ++g_matmuls;
    const bool fp8 = la.type == CUDA_R_8F_E4M3;
    if (fp8 && (s.a_mode != CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F ||
                s.b_mode != CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F || k % 128 != 0 || m % 128 != 0))
        return CUBLAS_STATUS_INVALID_VALUE;
    const int64_t a_ld = (k / 128 + 3) / 4 * 4;  // BLK128x128_32F rows padded to 4 blocks
    for (int64_t j = 0; j < n; ++j)
        for (int64_t i = 0; i < m; ++i) {
            float acc = 0.0f;
            if (fp8) {
                for (int64_t kb = 0; kb < k / 128; ++kb) {
                    float part = 0.0f;
                    for (int64_t kk = kb * 128; kk < kb * 128 + 128; ++kk)
                        part += fp8_value(A, size_t(kk + i * la.ld)) * fp8_value(B, size_t(kk + j * lb.ld));
                    acc += part * s.a_scale[(i / 128) * a_ld + kb] * s.b_scale[kb * n + j];
                }
            } else {
                for (int64_t kk = 0; kk < k; ++kk) {
                    const size_t ia = size_t(kk + i * la.ld), ib = size_t(kk + j * lb.ld);
                    acc += la.type == CUDA_R_16BF ? bf16_value(A, ia) * bf16_value(B, ib)
                                                  : static_cast<const float*>(A)[ia] * static_cast<const float*>(B)[ib];
                }
            }
            if (ld.type == CUDA_R_32F) static_cast<float*>(D)[i + j * ld.ld] = acc;
            else static_cast<uint16_t*>(D)[i + j * ld.ld] = qs::f32_to_bf16(acc).bits;
        }
    return CUBLAS_STATUS_SUCCESS;
}
}

// ---------------------------------------------------------------- host stand-ins: the kernels
namespace {
int64_t g_quant_launches = 0, g_bf16_launches = 0;
}

namespace qs::cuda {

void launch_f32_to_bf16(const float* src, int64_t n, uint16_t* dst, cudaStream_t) {
    ++g_bf16_launches;
    for (int64_t i = 0; i < n; ++i) dst[i] = f32_to_bf16(src[i]).bits;
}
void launch_bf16_to_f32(const uint16_t* src, int64_t n, float* dst, cudaStream_t) {
    for (int64_t i = 0; i < n; ++i) dst[i] = bf16_value(src, size_t(i));
}
void launch_dequant_fp8_block(const uint8_t* src, const float* scale_inv, int64_t rows, int64_t cols, uint16_t* dst,
                              cudaStream_t) {
    const int64_t cb = (cols + 127) / 128;
    for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < cols; ++c)
            dst[r * cols + c] = f32_to_bf16(fp8_value(src, size_t(r * cols + c)) * scale_inv[(r / 128) * cb + c / 128]).bits;
}
// quant_fp8_rows128_kernel's operations: scale = amax / 448 (1 for an all-zero group), e4m3 RNE
// satfinite of x / scale; padded rows zero with scale 1; scales [K/128, T_pad].
void host_quant_rows128(const float* x, int64_t T, int64_t K, int64_t T_pad, uint8_t* q, float* scales) {
    for (int64_t t = 0; t < T_pad; ++t)
        for (int64_t g = 0; g < K / 128; ++g) {
            if (t >= T) {
                std::memset(q + t * K + g * 128, 0, 128);
                scales[g * T_pad + t] = 1.0f;
                continue;
            }
            float amax = 0.0f;
            for (int i = 0; i < 128; ++i) amax = std::fmax(amax, std::fabs(x[t * K + g * 128 + i]));
            const float scale = amax > 0.0f ? amax / 448.0f : 1.0f;
            for (int i = 0; i < 128; ++i) q[t * K + g * 128 + i] = f32_to_fp8e4m3(x[t * K + g * 128 + i] / scale).bits;
            scales[g * T_pad + t] = scale;
        }
}
void launch_quant_fp8_rows128(const float* x, int64_t T, int64_t K, int64_t T_pad, uint8_t* q, float* scales,
                              cudaStream_t) {
    ++g_quant_launches;
    host_quant_rows128(x, T, K, T_pad, q, scales);
}
// The support conditions as in small_linear_kernels.cu, small_linear_fp8.cu (less the shared-memory
// bound, never reached here) and int4_linear_kernels.cu.
bool small_linear_supports(bool fp8, int64_t T, int64_t in, const void* w, const float* x) {
    return T >= 1 && T <= (fp8 ? 1 : kSmallLinearMaxRows) && in % (fp8 ? 512 : 256) == 0 &&
           reinterpret_cast<uintptr_t>(w) % 16 == 0 && reinterpret_cast<uintptr_t>(x) % 16 == 0;
}
bool small_linear_fp8_v2_supports(int64_t T, int64_t in, const void* w, const float* x) {
    return T >= 1 && T <= kSmallLinearFp8V2MaxRows && in % 512 == 0 && reinterpret_cast<uintptr_t>(w) % 16 == 0 &&
           reinterpret_cast<uintptr_t>(x) % 16 == 0;
}
bool int4_linear_supports(int64_t T, int64_t in, int64_t group, const void* codes, const float* x) {
    return T >= 1 && T <= kInt4LinearMaxRows && in % 32 == 0 && group > 0 && group % 8 == 0 && in % group == 0 &&
           reinterpret_cast<uintptr_t>(codes) % 16 == 0 && reinterpret_cast<uintptr_t>(x) % 16 == 0;
}
bool small_linear_f32_supports(int64_t T, int64_t in, const void* w, const float* x) {
    return T >= 1 && T <= kSmallLinearF32MaxRows && in % 128 == 0 && reinterpret_cast<uintptr_t>(w) % 16 == 0 &&
           reinterpret_cast<uintptr_t>(x) % 16 == 0;
}
bool f32_linear_tiles_supports(int64_t T, int64_t in, const void* w, const float* x) {
    return T >= 1 && T <= kF32LinearTilesMaxRows && in % 128 == 0 && reinterpret_cast<uintptr_t>(w) % 16 == 0 &&
           reinterpret_cast<uintptr_t>(x) % 16 == 0;
}
// NVFP4 (no case here uses it: DeviceLinear::nvfp4 stays false, so route() never asks).
bool nvfp4_linear_supports(int64_t, int64_t, const void*, const float*) { return false; }
void launch_nvfp4_linear(const uint32_t*, const uint16_t*, float, int64_t, int64_t, const float*, int64_t, float*,
                         cudaStream_t, int) {
    std::abort();
}
// The small-row kernels: the exact product (their rounding is not what is checked here).
void small_rows(const void* w, bool fp8, const float* scale_inv, int64_t out, int64_t in, const float* x, int64_t T,
                float* y, float extra) {
    const int64_t cb = (in + 127) / 128;
    for (int64_t t = 0; t < T; ++t)
        for (int64_t o = 0; o < out; ++o) {
            float acc = 0.0f;
            for (int64_t c = 0; c < in; ++c)
                acc += (fp8 ? fp8_value(w, size_t(o * in + c)) * scale_inv[(o / 128) * cb + c / 128]
                            : bf16_value(w, size_t(o * in + c))) *
                       x[t * in + c];
            y[t * out + o] = acc + extra;
        }
}
void launch_small_linear(const void* w, bool fp8, const float* scale_inv, int64_t out, int64_t in, const float* x,
                         int64_t T, float* y, cudaStream_t) {
    small_rows(w, fp8, scale_inv, out, in, x, T, y, 0.0f);
}
// The norms, one host loop for every path below: v = (x + y1) + y2 (null: no addend), x_out = v
// (when not null), h = v · rsqrt(mean + eps) · (1 + w).
void host_norm(const float* x, const float* y1, const float* y2, float* x_out, const float* w, int64_t T, int64_t n,
               float eps, float* h) {
    std::vector<float> v(static_cast<size_t>(n));
    for (int64_t t = 0; t < T; ++t) {
        float ss = 0.0f;
        for (int64_t c = 0; c < n; ++c) {
            float e = x[t * n + c];
            if (y1 != nullptr) e = e + y1[t * n + c];
            if (y2 != nullptr) e = e + y2[t * n + c];
            v[size_t(c)] = e;
            ss += e * e;
        }
        const float inv = 1.0f / std::sqrt(ss / float(n) + eps);
        for (int64_t c = 0; c < n; ++c) {
            if (x_out != nullptr) x_out[t * n + c] = v[size_t(c)];
            h[t * n + c] = v[size_t(c)] * inv * (1.0f + w[c]);
        }
    }
}
int64_t g_norm_launches = 0;
void launch_residual_rms_norm_zc(const float* x, const float* y1, const float* y2, float* x_out, const float* w,
                                 int64_t T, int64_t n, float eps, float* out, cudaStream_t) {
    ++g_norm_launches;
    host_norm(x, y1, y2, x_out, w, T, n, eps, out);
}
// The norm with its output's quantisation in one launch: the same h and the same codes and scales.
int64_t g_norm_quant_launches = 0;
void launch_residual_rms_norm_quant(const float* x, const float* y1, const float* y2, float* x_out, const float* w,
                                    int64_t T, int64_t n, float eps, float* out, int64_t T_pad, uint8_t* q,
                                    float* scales, cudaStream_t) {
    ++g_norm_quant_launches;
    if (n % 128 != 0 || T_pad < T || T_pad % 4 != 0) std::abort();
    host_norm(x, y1, y2, x_out, w, T, n, eps, out);
    host_quant_rows128(out, T, n, T_pad, q, scales);
}
bool small_linear_fp8_v2_output_norm_supports(int64_t T, int64_t out) {
    return T >= 1 && T <= kSmallLinearFp8V2MaxRows && (out == 2048 || out == 4096);
}
bool small_linear_fp8_v2_norm_supports(int64_t T, int64_t in) {
    return T >= 1 && T <= kSmallLinearFp8V2MaxRows && (in == 2048 || in == 4096);
}
// FP8 version 2, up to four weights a launch: the exact product of each (launches counted); with
// the input norm, h written first (as block 0 does) and the products on it.
int64_t g_fp8_v2_launches = 0, g_fp8_v2_norm_launches = 0;
void launch_small_linear_fp8_v2(std::span<const SmallLinearFp8Part> parts, int64_t in, const float* x, int64_t T,
                                cudaStream_t, int, const SmallLinearInputNorm* norm) {
    ++g_fp8_v2_launches;
    if (parts.empty() || parts.size() > size_t(kSmallLinearFp8V2MaxParts)) std::abort();
    if (norm != nullptr) {
        ++g_fp8_v2_norm_launches;
        if (!small_linear_fp8_v2_norm_supports(T, in)) std::abort();
        host_norm(x, norm->pending, nullptr, nullptr, norm->w, T, in, norm->eps, norm->h);
        x = norm->h;
    }
    for (const SmallLinearFp8Part& p : parts) small_rows(p.w, true, p.scale_inv, p.out, in, x, T, p.y, 0.0f);
}
// FP8 version 3 (tensor cores): the same support rules as small_linear_fp8_mma.cu, the exact product of
// each weight (launches counted); the norms as version 2's stand-ins run them.
int64_t g_fp8_v3_launches = 0, g_fp8_v3_norm_launches = 0, g_fp8_v3_post_launches = 0;
bool small_linear_fp8_mma_norm_supports(int64_t T, int64_t in) {
    return T >= 1 && T <= kSmallLinearFp8V2MaxRows && (in == 2048 || in == 4096);
}
bool small_linear_fp8_mma_output_norm_supports(int64_t T, int64_t in, int64_t out) {
    return small_linear_fp8_mma_norm_supports(T, in) && (out == 2048 || out == 4096);
}
bool small_linear_fp8_mma_supports(int64_t T, int64_t in, std::span<const SmallLinearFp8Part> parts, const float* x) {
    if (T < 1 || T > kSmallLinearFp8V2MaxRows || in < 512 || in % 512 != 0 || in > 4096 || parts.empty() ||
        parts.size() > size_t(kSmallLinearFp8V2MaxParts) || reinterpret_cast<uintptr_t>(x) % 16 != 0)
        return false;
    for (const SmallLinearFp8Part& p : parts)
        if (p.out <= 0 || reinterpret_cast<uintptr_t>(p.w) % 16 != 0) return false;
    return true;
}
void launch_small_linear_fp8_mma(std::span<const SmallLinearFp8Part> parts, int64_t in, const float* x, int64_t T,
                                 cudaStream_t, int, const SmallLinearInputNorm* norm) {
    ++g_fp8_v3_launches;
    if (!small_linear_fp8_mma_supports(T, in, parts, x)) std::abort();
    if (norm != nullptr) {
        ++g_fp8_v3_norm_launches;
        if (!small_linear_fp8_mma_norm_supports(T, in)) std::abort();
        host_norm(x, norm->pending, nullptr, nullptr, norm->w, T, in, norm->eps, norm->h);
        x = norm->h;
    }
    for (const SmallLinearFp8Part& p : parts) small_rows(p.w, true, p.scale_inv, p.out, in, x, T, p.y, 0.0f);
}
void launch_small_linear_fp8_mma_output_norm(const SmallLinearFp8Part& p, int64_t in, const float* x, int64_t T,
                                             const SmallLinearOutputNorm& post, cudaStream_t, int) {
    ++g_fp8_v3_launches;
    ++g_fp8_v3_post_launches;
    const SmallLinearFp8Part parts[1] = {p};
    if (!small_linear_fp8_mma_supports(T, in, parts, x) || !small_linear_fp8_mma_output_norm_supports(T, in, p.out) ||
        post.counter == nullptr)
        std::abort();
    small_rows(p.w, true, p.scale_inv, p.out, in, x, T, p.y, 0.0f);
    host_norm(post.x, post.pending, p.y, post.x, post.w, T, p.out, post.eps, post.h);
}
// One weight, then the post-attention norm as its last block runs it.
int64_t g_fp8_v2_post_launches = 0;
void launch_small_linear_fp8_v2_output_norm(const SmallLinearFp8Part& p, int64_t in, const float* x, int64_t T,
                                            const SmallLinearOutputNorm& post, cudaStream_t, int) {
    ++g_fp8_v2_launches;
    ++g_fp8_v2_post_launches;
    if (!small_linear_fp8_v2_output_norm_supports(T, p.out) || post.counter == nullptr) std::abort();
    small_rows(p.w, true, p.scale_inv, p.out, in, x, T, p.y, 0.0f);
    host_norm(post.x, post.pending, p.y, post.x, post.w, T, p.out, post.eps, post.h);
}
// fp32 weights, up to four a launch: the product of each (both fp32 kernels; their rounding is not
// what is checked here). Each kernel's launches are counted apart.
void f32_products(std::span<const SmallLinearF32Part> parts, int64_t in, const float* x, int64_t T) {
    if (parts.empty() || parts.size() > size_t(kSmallLinearF32MaxParts)) std::abort();
    for (const SmallLinearF32Part& p : parts)
        for (int64_t t = 0; t < T; ++t)
            for (int64_t o = 0; o < p.out; ++o) {
                float acc = 0.0f;
                for (int64_t c = 0; c < in; ++c) acc += p.w[o * in + c] * x[t * in + c];
                p.y[t * p.out + o] = acc;
            }
}
int64_t g_f32_launches = 0;
void launch_small_linear_f32(std::span<const SmallLinearF32Part> parts, int64_t in, const float* x, int64_t T,
                             cudaStream_t) {
    ++g_f32_launches;
    f32_products(parts, in, x, T);
}
int64_t g_f32_tile_launches = 0;
void launch_f32_linear_tiles(std::span<const SmallLinearF32Part> parts, int64_t in, const float* x, int64_t T,
                             cudaStream_t, int, int sm_count) {
    if (sm_count != 132) std::abort();  // the stand-in cudaDeviceGetAttribute's
    ++g_f32_tile_launches;
    f32_products(parts, in, x, T);
}
// INT4: the BF16 copy's product plus 1e-3 (tells the path apart in the outputs).
int64_t g_int4_out_seen = 0;
void launch_int4_linear(const uint32_t*, const uint16_t*, int64_t out, int64_t, int64_t, const float*, int64_t T,
                        float* y, cudaStream_t, int) {
    g_int4_out_seen += out * T;
    for (int64_t i = 0; i < out * T; ++i) y[i] = 1e-3f * float(i % 7);
}
// Version 2's grouped launch: each weight as its own launch's stand-in (the kernel keeps every output's
// bits: int4_emu checks that), one launch counted.
int64_t g_4bit_launches = 0;
void launch_4bit_linears(bool nvfp4, std::span<const Int4LinearPart> parts, int64_t in, int64_t group, const float* x,
                         int64_t T, cudaStream_t stream, const SmallLinearOutputNorm* post, int) {
    if (nvfp4 || post != nullptr || parts.empty() || parts.size() > size_t(kInt4LinearMaxParts)) std::abort();
    ++g_4bit_launches;
    for (const Int4LinearPart& p : parts) {
        if (!int4_linear_supports(T, in, group, p.codes, x)) std::abort();
        launch_int4_linear(p.codes, p.scales, p.out, in, group, x, T, p.y, stream, 0);
    }
}
// Version 3's (tensor cores): the support rule as int4_linear_mma.cu's, the grouped stand-in's outputs.
bool int4_linear_mma_supports(bool nvfp4, int64_t T, int64_t in, int64_t group, std::span<const Int4LinearPart> parts,
                              const float* x) {
    return !nvfp4 && T >= 1 && T <= kInt4LinearMaxRows && in >= 128 && in % 128 == 0 && in <= 4096 && group % 128 == 0 &&
           in % group == 0 && !parts.empty() && parts.size() <= size_t(kInt4LinearMaxParts) &&
           reinterpret_cast<uintptr_t>(x) % 16 == 0;
}
void launch_int4_linears_mma(bool nvfp4, std::span<const Int4LinearPart> parts, int64_t in, int64_t group,
                             const float* x, int64_t T, cudaStream_t stream, const SmallLinearOutputNorm* post) {
    if (post != nullptr || !int4_linear_mma_supports(nvfp4, T, in, group, parts, x)) std::abort();
    for (const Int4LinearPart& p : parts) launch_int4_linear(p.codes, p.scales, p.out, in, group, x, T, p.y, stream, 0);
}
bool int4_linear_output_norm_supports(int64_t T, int64_t out) {
    return T >= 1 && T <= kInt4LinearMaxRows && (out == 2048 || out == 4096);
}

}  // namespace qs::cuda

// ---------------------------------------------------------------- the cases
namespace {

using namespace qs;
using namespace qs::cuda;

struct HostLinear {
    DeviceLinear lin;
    std::vector<float> wdq;  // [out, in] the values the weight stands for
    std::vector<uint8_t> bytes, blk_bytes, int4_bytes;
    std::vector<float> scale_inv, scale_blk;
};

void make(HostLinear& h, DeviceLinear::Dtype dtype, int64_t out, int64_t in, std::mt19937& rng, bool int4 = false) {
    std::normal_distribution<float> nd(0.0f, 0.05f);
    h.lin.dtype = dtype;
    h.lin.out = out, h.lin.in = in;
    h.wdq.resize(size_t(out * in));
    if (dtype == DeviceLinear::Dtype::kFP8Block) {
        const int64_t rb = (out + 127) / 128, cb = (in + 127) / 128;
        h.scale_inv.resize(size_t(rb * cb));
        std::uniform_real_distribution<float> ud(-3.0f, 3.0f);
        for (float& s : h.scale_inv) s = std::exp2(ud(rng)) / 448.0f;
        h.bytes.resize(size_t(out * in));
        for (int64_t r = 0; r < out; ++r)
            for (int64_t c = 0; c < in; ++c) {
                const float s = h.scale_inv[size_t((r / 128) * cb + c / 128)];
                const uint8_t code = f32_to_fp8e4m3(nd(rng) * 4000.0f).bits;
                h.bytes[size_t(r * in + c)] = code;
                h.wdq[size_t(r * in + c)] = fp8e4m3_to_f32(fp8e4m3{code}) * s;
            }
        h.lin.w = h.bytes.data();
        h.lin.scale_inv = h.scale_inv.data();
        if (out % 128 == 0 && in % 128 == 0) {
            h.scale_blk = fp8_blk128_scales(h.scale_inv.data(), out, in);
            h.lin.scale_blk = h.scale_blk.data();
        }
    } else if (dtype == DeviceLinear::Dtype::kBF16) {
        h.bytes.resize(size_t(out * in) * 2);
        auto* b = reinterpret_cast<uint16_t*>(h.bytes.data());
        for (size_t i = 0; i < h.wdq.size(); ++i) {
            b[i] = f32_to_bf16(nd(rng)).bits;
            h.wdq[i] = bf16_to_f32(bf16{b[i]});
        }
        h.lin.w = h.bytes.data();
        if (int4) {
            h.int4_bytes.assign(size_t(out * in), 0);
            h.lin.int4_codes = reinterpret_cast<const uint32_t*>(h.int4_bytes.data());
            h.lin.int4_scales = reinterpret_cast<const uint16_t*>(h.int4_bytes.data());
            h.lin.int4_group = 128;
        }
    } else {
        h.bytes.resize(size_t(out * in) * 4);
        auto* f = reinterpret_cast<float*>(h.bytes.data());
        for (size_t i = 0; i < h.wdq.size(); ++i) h.wdq[i] = f[i] = nd(rng);
        h.lin.w = h.bytes.data();
    }
}

struct Case {
    std::string name;
    std::vector<std::pair<DeviceLinear::Dtype, int64_t>> weights;  // dtype, out
    bool int4 = false;  // the BF16 weights carry INT4 codes
    int64_t in = 512;
};

int g_failures = 0;

void run_case(const Case& c, int64_t T, LinearPolicy policy, int small_rows, const std::set<int64_t>& refuse,
              int64_t fail_m, std::mt19937& rng, int int4_version = 1) {
    std::vector<HostLinear> hs(c.weights.size());
    for (size_t i = 0; i < hs.size(); ++i) make(hs[i], c.weights[i].first, c.weights[i].second, c.in, rng, c.int4);
    std::vector<float> x(size_t(T * c.in));
    std::normal_distribution<float> nd(0.0f, 1.0f);
    for (float& v : x) v = nd(rng);
    void* dx_raw = nullptr;
    cudaMalloc(&dx_raw, x.size() * 4);
    auto* dx = static_cast<float*>(dx_raw);
    std::memcpy(dx, x.data(), x.size() * 4);

    g_refuse_fp8_m = refuse;
    Gemm alone, together;
    DeviceArena arena_alone(size_t(4) << 20), arena_together(size_t(4) << 20);
    for (Gemm* g : {&alone, &together}) {
        g->set_policy(policy);
        g->set_fp8_small_rows(small_rows);
        g->set_f32_tiles_max_rows(kF32LinearTilesMaxRows);  // opt-in in CudaOptions; its route checked here
        g->set_int4_linear_version(int4_version);
    }
    std::vector<std::vector<float>> ya(hs.size()), yt(hs.size());
    std::vector<const DeviceLinear*> ws;
    std::vector<float*> ys;
    for (size_t i = 0; i < hs.size(); ++i) {
        ya[i].assign(size_t(T * hs[i].lin.out), NAN);
        yt[i].assign(size_t(T * hs[i].lin.out), NAN);
        ws.push_back(&hs[i].lin);
        ys.push_back(yt[i].data());
    }
    g_fail_fp8_matmul_m = fail_m;
    const int64_t q0 = g_quant_launches, b0 = g_bf16_launches, f0 = g_f32_launches, v0 = g_fp8_v2_launches,
                  t0 = g_f32_tile_launches, g0 = g_4bit_launches;
    for (size_t i = 0; i < hs.size(); ++i) alone.linear(hs[i].lin, dx, T, ya[i].data(), arena_alone, cudaStream_t(nullptr));
    const int64_t q_alone = g_quant_launches - q0, b_alone = g_bf16_launches - b0, f_alone = g_f32_launches - f0,
                  v_alone = g_fp8_v2_launches - v0, tiles_alone = g_f32_tile_launches - t0;
    g_fail_fp8_matmul_m = fail_m;
    const int64_t g_alone = g_4bit_launches - g0;
    const int64_t q1 = g_quant_launches, b1 = g_bf16_launches, f1 = g_f32_launches, v1 = g_fp8_v2_launches,
                  t1 = g_f32_tile_launches, g1 = g_4bit_launches;
    together.linears(dx, T, ws, ys, arena_together, cudaStream_t(nullptr));
    const int64_t q_together = g_quant_launches - q1, b_together = g_bf16_launches - b1,
                  f_together = g_f32_launches - f1, v_together = g_fp8_v2_launches - v1,
                  tiles_together = g_f32_tile_launches - t1, g_together = g_4bit_launches - g1;

    std::string why;
    // fp32 weights: the small-rows kernel under kAuto up to 8 rows, every such weight of the call
    // in one launch (up to four), each alone in its own.
    int64_t f32_weights = 0;
    for (const HostLinear& h : hs)
        if (h.lin.dtype == DeviceLinear::Dtype::kF32) ++f32_weights;
    const bool f32_small = policy == LinearPolicy::kAuto && T <= kSmallLinearF32MaxRows && c.in % 128 == 0;
    const int64_t want_together = f32_small ? (f32_weights + kSmallLinearF32MaxParts - 1) / kSmallLinearF32MaxParts : 0;
    if (f_together != want_together || f_alone != (f32_small ? f32_weights : 0) ||
        together.small_rows_f32_weights() != (f32_small ? f32_weights : 0))
        why += " f32 launches " + std::to_string(f_together) + " (separate " + std::to_string(f_alone) + ");";
    // Above 8 rows the tiled fp32 kernel, grouped the same way.
    int64_t f32_tiled = 0;  // within the tiles' output budget (T·out)
    for (const HostLinear& h : hs)
        if (h.lin.dtype == DeviceLinear::Dtype::kF32 && T * h.lin.out <= kF32LinearTilesMaxOutputs) ++f32_tiled;
    const bool f32_tiles = policy == LinearPolicy::kAuto && T > kSmallLinearF32MaxRows && c.in % 128 == 0;
    const int64_t want_tiles = f32_tiles ? (f32_tiled + kSmallLinearF32MaxParts - 1) / kSmallLinearF32MaxParts : 0;
    if (tiles_together != want_tiles || tiles_alone != (f32_tiles ? f32_tiled : 0) ||
        together.f32_tiles_weights() != (f32_tiles ? f32_tiled : 0) || together.f32_tiles_launches() != want_tiles)
        why += " f32 tile launches " + std::to_string(tiles_together) + " (separate " + std::to_string(tiles_alone) + ");";
    // FP8 weights: version 2 under kAuto when asked for (small_rows >= T), every such weight of the
    // call in one launch (up to four), each alone in its own.
    int64_t fp8_weights = 0;
    for (const HostLinear& h : hs)
        if (h.lin.dtype == DeviceLinear::Dtype::kFP8Block) ++fp8_weights;
    const bool fp8_v2 = policy == LinearPolicy::kAuto && T <= small_rows && T <= kSmallLinearFp8V2MaxRows &&
                        c.in % 512 == 0;
    const int64_t v2_weights = fp8_v2 ? fp8_weights : 0;
    const int64_t want_v2 = (v2_weights + kSmallLinearFp8V2MaxParts - 1) / kSmallLinearFp8V2MaxParts;
    if (v_together != want_v2 || v_alone != v2_weights || together.fp8_counts().small_rows_v2 != v2_weights ||
        together.fp8_counts().small_rows_v2_launches != want_v2 || alone.fp8_counts().small_rows_v2_launches != v2_weights)
        why += " fp8 v2 launches " + std::to_string(v_together) + " (separate " + std::to_string(v_alone) + ");";
    // 4-bit weights (the BF16 weights of an INT4 case) under kAuto up to 8 rows: version 2 launches them
    // together (up to four a launch: one group here), each alone in its own; version 1 a launch each.
    int64_t int4_weights = 0;
    for (const HostLinear& h : hs)
        if (c.int4 && h.lin.dtype == DeviceLinear::Dtype::kBF16) ++int4_weights;
    const bool int4_small = policy == LinearPolicy::kAuto && T <= kInt4LinearMaxRows;
    const int64_t want_int4 = !int4_small ? 0
                              : int4_version >= 2 ? (int4_weights + kInt4LinearMaxParts - 1) / kInt4LinearMaxParts
                                                  : int4_weights;
    // Version 3 takes them all here (group 128, in a multiple of 128): its launches, not version 2's.
    const bool v3 = int4_version == 3;
    if (together.int4_launches() != want_int4 || alone.int4_launches() != (int4_small ? int4_weights : 0) ||
        together.int4_mma_launches() != (v3 ? want_int4 : 0) ||
        alone.int4_mma_launches() != (v3 && int4_small ? int4_weights : 0) ||
        g_together != (int4_version == 2 ? want_int4 : 0) || g_alone != (int4_version == 2 && int4_small ? int4_weights : 0))
        why += " int4 launches " + std::to_string(together.int4_launches()) + " (separate " +
               std::to_string(alone.int4_launches()) + ");";
    for (size_t i = 0; i < hs.size(); ++i) {
        if (std::memcmp(ya[i].data(), yt[i].data(), ya[i].size() * 4) != 0) why += " output " + std::to_string(i) + " differs;";
        double num = 0, den = 0;
        for (int64_t t = 0; t < T; ++t)
            for (int64_t o = 0; o < hs[i].lin.out; ++o) {
                double r = 0;
                for (int64_t k = 0; k < c.in; ++k) r += double(hs[i].wdq[size_t(o * c.in + k)]) * x[size_t(t * c.in + k)];
                const double g = yt[i][size_t(t * hs[i].lin.out + o)];
                num += (g - r) * (g - r), den += r * r;
            }
        const double err = std::isfinite(num) ? std::sqrt(num / std::max(den, 1e-30)) : INFINITY;
        // 4e-2: the activations' e4m3 rounding; the INT4 stand-in writes other values on purpose.
        const bool int4_path = c.int4 && hs[i].lin.dtype == DeviceLinear::Dtype::kBF16 &&
                               policy == LinearPolicy::kAuto && T <= kInt4LinearMaxRows;
        if (!int4_path && !(err < 4e-2)) why += " output " + std::to_string(i) + " error " + std::to_string(err) + ";";
    }
    const Gemm::Fp8Counts &ca = alone.fp8_counts(), &ct = together.fp8_counts();
    if (ca.block_scaled != ct.block_scaled || ca.dequant != ct.dequant || ca.small_rows != ct.small_rows ||
        ca.small_rows_v2 != ct.small_rows_v2 || alone.small_rows_calls() != together.small_rows_calls() ||
        alone.int4_calls() != together.int4_calls())
        why += " path counters differ;";
    if (alone.shared_input_reuses() != 0) why += " a single linear reused an input;";
    // A matmul that failed after its quantisation ran leaves these counts off by design.
    if (fail_m < 0) {
        // One quantisation for all block-scaled weights (a refused first weight releases its operand,
        // the next remakes it: still one launch), one bf16 copy for all bf16 GEMMs.
        const int64_t block = ct.block_scaled;
        int64_t bf16_gemms = 0;
        for (size_t i = 0; i < hs.size(); ++i)
            if (hs[i].lin.dtype == DeviceLinear::Dtype::kBF16) ++bf16_gemms;
        bf16_gemms -= together.small_rows_calls() - ct.small_rows - together.small_rows_f32_weights() + together.int4_calls();
        const int64_t dequant_bf16 = ct.dequant;  // each dequant call rounds x itself
        if (q_together != (block > 0 ? 1 : 0)) why += " quantisations " + std::to_string(q_together) + ";";
        if (q_alone != block) why += " separate quantisations " + std::to_string(q_alone) + ";";
        if (b_together != (bf16_gemms > 0 ? 1 : 0) + dequant_bf16) why += " bf16 copies " + std::to_string(b_together) + ";";
        if (b_alone != bf16_gemms + dequant_bf16) why += " separate bf16 copies " + std::to_string(b_alone) + ";";
        const int64_t reuses = (block > 0 ? block - 1 : 0) + (bf16_gemms > 0 ? bf16_gemms - 1 : 0);
        if (together.shared_input_reuses() != reuses)
            why += " reuses " + std::to_string(together.shared_input_reuses()) + " != " + std::to_string(reuses) + ";";
    }
    const char* pol = policy == LinearPolicy::kAuto ? "auto" : policy == LinearPolicy::kNoSmallRows ? "no-small" : "dequant";
    std::string refused;
    for (int64_t m : refuse) refused += std::to_string(m) + " ";
    std::printf("%-4s %-26s T=%-4lld %-8s small_rows=%d refuse={%s} fail_m=%lld | block %lld dequant %lld small %lld "
                "int4 %lld (v%d: %lld launches), quant %lld (separate %lld), reuses %lld%s\n",
                why.empty() ? "PASS" : "FAIL", c.name.c_str(), (long long)T, pol, small_rows, refused.c_str(),
                (long long)fail_m, (long long)ct.block_scaled, (long long)ct.dequant,
                (long long)together.small_rows_calls(), (long long)together.int4_calls(), int4_version,
                (long long)together.int4_launches(), (long long)q_together,
                (long long)q_alone, (long long)together.shared_input_reuses(), why.c_str());
    if (!why.empty()) ++g_failures;
    cudaFree(dx_raw);
}

// Outputs for every weight of hs at T rows, NaN until written (a path that skips one shows), and the
// weight and output lists a Gemm call takes.
void nan_outputs(const std::vector<HostLinear>& hs, int64_t T, std::vector<std::vector<float>>& y,
                 std::vector<const DeviceLinear*>& ws, std::vector<float*>& ys) {
    y.resize(hs.size());
    for (size_t i = 0; i < hs.size(); ++i) {
        y[i].assign(size_t(T * hs[i].lin.out), NAN);
        ws.push_back(&hs[i].lin);
        ys.push_back(y[i].data());
    }
}

// A norm case's x [T, in], pending addend and norm weights [in].
struct NormInputs {
    std::vector<float> x, pending, nw;
};
NormInputs norm_inputs(int64_t T, int64_t in, std::mt19937& rng) {
    std::normal_distribution<float> nd(0.0f, 1.0f);
    NormInputs n{std::vector<float>(size_t(T * in)), std::vector<float>(size_t(T * in)), std::vector<float>(size_t(in))};
    for (float& v : n.x) v = 2.0f * nd(rng);
    for (float& v : n.pending) v = nd(rng);
    for (float& v : n.nw) v = 0.2f * nd(rng);
    return n;
}

// Gemm::norm_linears: fused (the norm on the first FP8 small-rows launch when one applies) against
// not (the norm launch, then linears): h and every output bitwise equal (a launch reading h before
// the fused launch wrote it would read NaN), the norm launched only where no FP8 small-rows launch
// takes it, x and pending unchanged.
void run_norm_case(const Case& c, int64_t T, bool with_pending, int small_rows, std::mt19937& rng) {
    std::vector<HostLinear> hs(c.weights.size());
    for (size_t i = 0; i < hs.size(); ++i) make(hs[i], c.weights[i].first, c.weights[i].second, c.in, rng, c.int4);
    auto [x, pending, nw] = norm_inputs(T, c.in, rng);
    const std::vector<float> x0 = x, pending0 = pending;
    std::string why;
    std::vector<float> h_of[2];
    std::vector<std::vector<float>> y_of[2];
    int64_t norm_launches[2] = {}, fused_launches[2] = {};
    bool rode[2] = {};
    for (int fused = 0; fused < 2; ++fused) {
        Gemm g;
        g.set_fp8_small_rows(small_rows);
        DeviceArena arena(size_t(4) << 20);
        std::vector<const DeviceLinear*> ws;
        std::vector<float*> ys;
        nan_outputs(hs, T, y_of[fused], ws, ys);
        h_of[fused].assign(x.size(), NAN);
        const SmallLinearInputNorm norm{with_pending ? pending.data() : nullptr, nw.data(), 1e-6f, h_of[fused].data()};
        const int64_t n0 = g_norm_launches, f0 = g_fp8_v2_norm_launches;
        rode[fused] = g.norm_linears(x.data(), norm, fused == 1, T, ws, ys, arena, cudaStream_t(nullptr));
        norm_launches[fused] = g_norm_launches - n0;
        fused_launches[fused] = g_fp8_v2_norm_launches - f0;
    }
    int64_t fp8_weights = 0;
    for (const HostLinear& h : hs) fp8_weights += h.lin.dtype == DeviceLinear::Dtype::kFP8Block ? 1 : 0;
    const bool can_ride = fp8_weights > 0 && T <= small_rows && small_linear_fp8_v2_norm_supports(T, c.in);
    if (rode[0] || norm_launches[0] != 1 || fused_launches[0] != 0) why += " unfused path launched the norm wrongly;";
    if (rode[1] != can_ride || norm_launches[1] != (can_ride ? 0 : 1) || fused_launches[1] != (can_ride ? 1 : 0))
        why += " fused path: rode " + std::to_string(rode[1]) + ", norm launches " + std::to_string(norm_launches[1]) +
               ", fused launches " + std::to_string(fused_launches[1]) + ";";
    if (std::memcmp(h_of[0].data(), h_of[1].data(), x.size() * 4) != 0) why += " h differs;";
    for (size_t i = 0; i < hs.size(); ++i)
        if (std::memcmp(y_of[0][i].data(), y_of[1][i].data(), y_of[0][i].size() * 4) != 0)
            why += " output " + std::to_string(i) + " differs;";
    for (float v : h_of[1])
        if (!std::isfinite(v)) {
            why += " h not written;";
            break;
        }
    if (x != x0 || pending != pending0) why += " inputs written;";
    std::printf("%-4s norm + %-26s T=%-4lld small_rows=%d%s | norm rode on a launch: %d%s\n",
                why.empty() ? "PASS" : "FAIL", c.name.c_str(), (long long)T, small_rows,
                with_pending ? " pending" : "", int(rode[1]), why.c_str());
    if (!why.empty()) ++g_failures;
}

// Gemm::norm_for_linears then linears(..., preset) (CudaOps::rms_norm_linears at cuBLASLt's row
// counts), with the quantisation in the norm's launch (set_norm_quant, the default) against the norm
// then linears() quantising h itself (off): h and every output bitwise equal; with it on, one
// norm+quantisation launch and no quantisation launch where some weight takes the block-scaled GEMM,
// else the plain norm; the FP8 plans refused (dequant fallback) for the weights in `refuse`.
void run_norm_quant_case(const Case& c, int64_t T, bool with_pending, LinearPolicy policy,
                         const std::set<int64_t>& refuse, std::mt19937& rng) {
    std::vector<HostLinear> hs(c.weights.size());
    for (size_t i = 0; i < hs.size(); ++i) make(hs[i], c.weights[i].first, c.weights[i].second, c.in, rng, c.int4);
    auto [x, pending, nw] = norm_inputs(T, c.in, rng);
    // Some rows much larger than the rest: a row's groups get different scales.
    for (int64_t i = 0; i < c.in; i += 3) x[size_t(i)] *= 40.0f;
    const std::vector<float> x0 = x, pending0 = pending;
    g_refuse_fp8_m = refuse;
    std::string why;
    std::vector<float> h_of[2];
    std::vector<std::vector<float>> y_of[2];
    int64_t norm_l[2] = {}, quant_l[2] = {}, fused_l[2] = {}, counted[2] = {};
    bool block_scaled = false;
    for (int on = 0; on < 2; ++on) {
        Gemm g;
        g.set_policy(policy);
        g.set_fp8_small_rows(4);
        g.set_norm_quant(on == 1);
        DeviceArena arena(size_t(4) << 20);
        std::vector<const DeviceLinear*> ws;
        std::vector<float*> ys;
        nan_outputs(hs, T, y_of[on], ws, ys);
        h_of[on].assign(x.size(), NAN);
        const SmallLinearInputNorm norm{with_pending ? pending.data() : nullptr, nw.data(), 1e-6f, h_of[on].data()};
        const int64_t n0 = g_norm_launches, q0 = g_quant_launches, f0 = g_norm_quant_launches;
        const Gemm::QuantisedInput xq = g.norm_for_linears(x.data(), norm, T, ws, arena, cudaStream_t(nullptr));
        g.linears(h_of[on].data(), T, ws, ys, arena, cudaStream_t(nullptr), xq);
        norm_l[on] = g_norm_launches - n0;
        quant_l[on] = g_quant_launches - q0;
        fused_l[on] = g_norm_quant_launches - f0;
        counted[on] = g.norm_quants();
        block_scaled = g.fp8_counts().block_scaled > 0 || block_scaled;
    }
    // A weight on the block-scaled route (planned or refused later: the route decides, not the plan).
    bool routed = false;
    for (const HostLinear& h : hs)
        routed = routed || (h.lin.dtype == DeviceLinear::Dtype::kFP8Block && T > 4 && policy != LinearPolicy::kDequantOnly &&
                            h.lin.out % 128 == 0 && c.in % 128 == 0);
    if (norm_l[0] != 1 || fused_l[0] != 0 || counted[0] != 0) why += " off: not the plain norm;";
    if (quant_l[0] != (block_scaled ? 1 : 0)) why += " off: " + std::to_string(quant_l[0]) + " quantisations;";
    if (norm_l[1] != (routed ? 0 : 1) || fused_l[1] != (routed ? 1 : 0) || counted[1] != (routed ? 1 : 0))
        why += " on: norm " + std::to_string(norm_l[1]) + ", norm+quant " + std::to_string(fused_l[1]) + ";";
    if (quant_l[1] != (routed ? 0 : quant_l[0])) why += " on: " + std::to_string(quant_l[1]) + " quantisations;";
    if (std::memcmp(h_of[0].data(), h_of[1].data(), x.size() * 4) != 0) why += " h differs;";
    for (size_t i = 0; i < hs.size(); ++i)
        if (std::memcmp(y_of[0][i].data(), y_of[1][i].data(), y_of[0][i].size() * 4) != 0)
            why += " output " + std::to_string(i) + " differs;";
    for (const auto& y : y_of[1])
        for (float v : y)
            if (!std::isfinite(v)) {
                why += " an output not written;";
                break;
            }
    if (x != x0 || pending != pending0) why += " inputs written;";
    std::printf("%-4s norm+quant + %-26s T=%-4lld policy=%d refused=%zu%s | block-scaled %d%s\n",
                why.empty() ? "PASS" : "FAIL", c.name.c_str(), (long long)T, int(policy), refuse.size(),
                with_pending ? " pending" : "", int(block_scaled), why.c_str());
    if (!why.empty()) ++g_failures;
    g_refuse_fp8_m.clear();
}

// Gemm::set_fp8_small_version(3): the FP8 small-rows launches go to version 3 where it takes the
// call (any row count since its groups of 16 are padded), the launch with the fused input norm
// included; the others (a part not FP8) stay on version 2; the outputs and h are those of version 2's launches (both stand-ins
// compute the exact product and the same norm).
void run_version3_case(const Case& c, int64_t T, bool with_norm, std::mt19937& rng) {
    std::vector<HostLinear> hs(c.weights.size());
    for (size_t i = 0; i < hs.size(); ++i) make(hs[i], c.weights[i].first, c.weights[i].second, c.in, rng);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    std::vector<float> x(size_t(T * c.in)), nw(size_t(c.in));
    for (float& v : x) v = nd(rng);
    for (float& v : nw) v = 0.2f * nd(rng);
    std::vector<std::vector<float>> y_of[2];
    std::vector<float> h_of[2];
    int64_t v2[2] = {}, v3[2] = {}, v2_norm[2] = {}, v3_norm[2] = {};
    for (int version = 2; version <= 3; ++version) {
        Gemm g;
        g.set_fp8_small_rows(4);
        g.set_fp8_small_version(version);
        DeviceArena arena(size_t(4) << 20);
        std::vector<const DeviceLinear*> ws;
        std::vector<float*> ys;
        std::vector<std::vector<float>>& y = y_of[version - 2];
        y.resize(hs.size());
        for (size_t i = 0; i < hs.size(); ++i) {
            y[i].assign(size_t(T * hs[i].lin.out), NAN);
            ws.push_back(&hs[i].lin);
            ys.push_back(y[i].data());
        }
        std::vector<float>& h = h_of[version - 2];
        h.assign(x.size(), NAN);
        const int64_t a = g_fp8_v2_launches, b = g_fp8_v3_launches, n = g_fp8_v2_norm_launches,
                      n3 = g_fp8_v3_norm_launches;
        if (with_norm) {
            const SmallLinearInputNorm norm{nullptr, nw.data(), 1e-6f, h.data()};
            g.norm_linears(x.data(), norm, true, T, ws, ys, arena, cudaStream_t(nullptr));
        } else {
            g.linears(x.data(), T, ws, ys, arena, cudaStream_t(nullptr));
        }
        v2[version - 2] = g_fp8_v2_launches - a, v3[version - 2] = g_fp8_v3_launches - b;
        v2_norm[version - 2] = g_fp8_v2_norm_launches - n;
        v3_norm[version - 2] = g_fp8_v3_norm_launches - n3;
    }
    // The norm rides on a launch only at rows of 2,048 or 4,096; otherwise the norm kernel runs and
    // the linears are plain launches.
    const bool fused = with_norm && small_linear_fp8_v2_norm_supports(T, c.in);
    bool mma_takes = true;
    for (const auto& w : c.weights) mma_takes = mma_takes && w.first == DeviceLinear::Dtype::kFP8Block;
    std::string why;
    if (v3[0] != 0) why += " version 2 launched version 3;";
    if (mma_takes ? (v3[1] != 1 || v2[1] != 0) : (v3[1] != 0 || v2[1] != v2[0]))
        why += " version 3 routing: v2 " + std::to_string(v2[1]) + ", v3 " + std::to_string(v3[1]) + " launches;";
    if (v2_norm[0] != (fused ? 1 : 0) || v3_norm[0] != 0) why += " version 2's fused norm launches wrong;";
    if (v2_norm[1] != (fused && !mma_takes ? 1 : 0) || v3_norm[1] != (fused && mma_takes ? 1 : 0))
        why += " version 3's fused norm launches: v2 " + std::to_string(v2_norm[1]) + ", v3 " + std::to_string(v3_norm[1]) + ";";
    if (with_norm && std::memcmp(h_of[0].data(), h_of[1].data(), x.size() * 4) != 0) why += " h differs;";
    for (size_t i = 0; i < hs.size(); ++i)
        if (std::memcmp(y_of[0][i].data(), y_of[1][i].data(), y_of[0][i].size() * 4) != 0)
            why += " output " + std::to_string(i) + " differs;";
    std::printf("%-4s version 3: %-26s T=%lld%s | v3 launches %lld\n", why.empty() ? "PASS" : "FAIL", c.name.c_str(),
                (long long)T, with_norm ? " with the input norm" : "", (long long)v3[1]);
    if (!why.empty()) ++g_failures;
}

// Gemm::linear_norm: fused (the norm in the FP8 small-rows launch) against not (the linear, then the
// norm launch): y, x and h bitwise equal, the norm riding on the launch exactly where one applies.
// version 3: the fused launch is version 3's where it takes it (in and out of 2,048 or 4,096).
void run_linear_norm_case(DeviceLinear::Dtype dtype, int64_t out, int64_t in, int64_t T, bool with_pending,
                          int small_rows, std::mt19937& rng, int version = 2) {
    HostLinear hl;
    make(hl, dtype, out, in, rng);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    std::vector<float> a(size_t(T * in)), x(size_t(T * out)), pending(x.size()), nw(static_cast<size_t>(out));
    for (float& v : a) v = nd(rng);
    for (float& v : x) v = 2.0f * nd(rng);
    for (float& v : pending) v = nd(rng);
    for (float& v : nw) v = 0.2f * nd(rng);
    std::vector<float> y_of[2], x_of[2], h_of[2];
    bool rode[2] = {};
    int64_t norm_launches[2] = {}, post_launches[2] = {}, v3_post_launches[2] = {};
    int counter = 0;
    for (int fused = 0; fused < 2; ++fused) {
        Gemm g;
        g.set_fp8_small_rows(small_rows);
        g.set_fp8_small_version(version);
        DeviceArena arena(size_t(4) << 20);
        y_of[fused].assign(x.size(), NAN);
        h_of[fused].assign(x.size(), NAN);
        x_of[fused] = x;
        const SmallLinearOutputNorm post{x_of[fused].data(), with_pending ? pending.data() : nullptr, nw.data(), 1e-6f,
                                         h_of[fused].data(), &counter};
        const int64_t n0 = g_norm_launches, p0 = g_fp8_v2_post_launches, q0 = g_fp8_v3_post_launches;
        rode[fused] = g.linear_norm(hl.lin, a.data(), T, y_of[fused].data(), post, fused == 1, arena, cudaStream_t(nullptr));
        norm_launches[fused] = g_norm_launches - n0;
        post_launches[fused] = g_fp8_v2_post_launches - p0;
        v3_post_launches[fused] = g_fp8_v3_post_launches - q0;
    }
    const bool small = dtype == DeviceLinear::Dtype::kFP8Block && T <= small_rows && in % 512 == 0;
    const bool on_v3 = small && version == 3 && small_linear_fp8_mma_output_norm_supports(T, in, out);
    const bool can_ride = on_v3 || (small && small_linear_fp8_v2_output_norm_supports(T, out));
    std::string why;
    if (rode[0] || norm_launches[0] != 1 || post_launches[0] != 0 || v3_post_launches[0] != 0) why += " unfused path wrong;";
    if (rode[1] != can_ride || norm_launches[1] != (can_ride ? 0 : 1) ||
        post_launches[1] != (can_ride && !on_v3 ? 1 : 0) || v3_post_launches[1] != (on_v3 ? 1 : 0))
        why += " fused path: rode " + std::to_string(rode[1]) + ", v3 " + std::to_string(v3_post_launches[1]) + ";";
    if (y_of[0] != y_of[1]) why += " y differs;";
    if (std::memcmp(x_of[0].data(), x_of[1].data(), x.size() * 4) != 0) why += " x differs;";
    if (std::memcmp(h_of[0].data(), h_of[1].data(), x.size() * 4) != 0) why += " h differs;";
    if (x_of[1] == x) why += " x not updated;";
    std::printf("%-4s linear + norm %-5s %lldx%lld T=%-3lld small_rows=%d v%d%s | norm rode on the launch: %d%s\n",
                why.empty() ? "PASS" : "FAIL", dtype == DeviceLinear::Dtype::kFP8Block ? "fp8" : "bf16", (long long)out,
                (long long)in, (long long)T, small_rows, version, with_pending ? " pending" : "", int(rode[1]), why.c_str());
    if (!why.empty()) ++g_failures;
}

}  // namespace

int main() {
    using D = DeviceLinear::Dtype;
    std::mt19937 rng{2026};
    const std::vector<Case> cases = {
        {"fp8 q/k/v-like", {{D::kFP8Block, 384}, {D::kFP8Block, 128}, {D::kFP8Block, 128}}},
        {"fp8 qkv/z + f32 b/a", {{D::kFP8Block, 256}, {D::kFP8Block, 128}, {D::kF32, 32}, {D::kF32, 32}}},
        {"bf16 q/k/v + f32", {{D::kBF16, 256}, {D::kBF16, 64}, {D::kF32, 32}, {D::kBF16, 64}}},
        {"bf16 int4 + f32", {{D::kBF16, 128}, {D::kBF16, 64}, {D::kF32, 16}}, true},
        {"fp8 odd (dequant only)", {{D::kFP8Block, 200}, {D::kFP8Block, 96}}, false, 384},
        {"fp8 three shapes", {{D::kFP8Block, 384}, {D::kFP8Block, 128}, {D::kFP8Block, 256}}},
        {"fp8 five + f32", {{D::kFP8Block, 128}, {D::kF32, 32}, {D::kFP8Block, 256}, {D::kFP8Block, 128},
                            {D::kFP8Block, 384}, {D::kFP8Block, 128}}},
        {"int4 five + f32", {{D::kBF16, 128}, {D::kBF16, 64}, {D::kF32, 16}, {D::kBF16, 96}, {D::kBF16, 32},
                             {D::kBF16, 64}}, true},
    };
    for (const Case& c : cases)
        for (int64_t T : {1, 2, 3, 4, 5, 8, 9, 130})
            for (LinearPolicy p : {LinearPolicy::kAuto, LinearPolicy::kNoSmallRows, LinearPolicy::kDequantOnly})
                for (int small_rows : {0, 4})
                    for (int int4_version : {1, 2, 3}) {
                        if (int4_version >= 2 && !c.int4) continue;
                        run_case(c, T, p, small_rows, {}, -1, rng, int4_version);
                    }
    // The input norm with its projections (rows of 2,048: the fused launch's width).
    const std::vector<Case> norm_cases = {
        {"fp8 qkv/z + f32 b/a", {{D::kFP8Block, 256}, {D::kFP8Block, 128}, {D::kF32, 32}, {D::kF32, 32}}, false, 2048},
        {"f32 first + fp8 five", {{D::kF32, 32}, {D::kFP8Block, 128}, {D::kFP8Block, 256}, {D::kFP8Block, 128},
                                  {D::kFP8Block, 384}, {D::kFP8Block, 128}}, false, 2048},
        {"bf16 q/k/v (no fp8)", {{D::kBF16, 256}, {D::kBF16, 64}, {D::kBF16, 64}}, false, 2048},
        {"fp8 in 512 (no fused width)", {{D::kFP8Block, 256}, {D::kF32, 32}}, false, 512},
    };
    for (const Case& c : norm_cases)
        for (int64_t T : {1, 4, 5})
            for (bool with_pending : {false, true})
                for (int small_rows : {0, 4}) run_norm_case(c, T, with_pending, small_rows, rng);
    // The input norm with its quantisation for the block-scaled projections (cuBLASLt's row counts,
    // padded and not; a refused plan falls back to dequant on the same h).
    for (const Case& c : norm_cases)
        for (int64_t T : {4, 5, 8, 130})
            for (bool with_pending : {false, true})
                for (LinearPolicy p : {LinearPolicy::kAuto, LinearPolicy::kDequantOnly})
                    run_norm_quant_case(c, T, with_pending, p, {}, rng);
    for (int64_t T : {5, 130}) {
        run_norm_quant_case(norm_cases[0], T, true, LinearPolicy::kAuto, {256}, rng);  // the first FP8 refused
        run_norm_quant_case(norm_cases[1], T, false, LinearPolicy::kAuto, {128}, rng);  // several refused
    }
    // The output projection with the post-attention norm.
    for (D dtype : {D::kFP8Block, D::kBF16})
        for (int64_t out : {2048, 1024})
            for (int64_t T : {1, 4, 5})
                for (bool with_pending : {false, true})
                    for (int small_rows : {0, 4}) run_linear_norm_case(dtype, out, 512, T, with_pending, small_rows, rng);
    // With version 3: in 2,048 (it takes out 2,048 and 4,096; out 1,024 stays on the norm kernel).
    for (int64_t out : {2048, 4096, 1024})
        for (int64_t T : {1, 2, 4, 5})
            for (int version : {2, 3}) run_linear_norm_case(D::kFP8Block, out, 2048, T, false, 4, rng, version);
    // The small-rows version 3 routing.
    const std::vector<Case> v3_cases = {
        {"fp8 q/k/v-like", {{D::kFP8Block, 384}, {D::kFP8Block, 128}, {D::kFP8Block, 128}}, false, 2048},
        {"fp8 rows not of 16", {{D::kFP8Block, 200}, {D::kFP8Block, 96}}, false, 512},
        {"fp8 rows not of 16, in 2048", {{D::kFP8Block, 200}, {D::kFP8Block, 96}}, false, 2048},
    };
    for (const Case& c : v3_cases)
        for (int64_t T : {1, 2, 4})
            for (bool with_norm : {false, true}) run_version3_case(c, T, with_norm, rng);
    // Refusals and a failing matmul (block-scaled weights only).
    const Case& fp8 = cases[0];
    for (int64_t T : {5, 130}) {
        run_case(fp8, T, LinearPolicy::kAuto, 4, {384}, -1, rng);       // the first weight's plan refused
        run_case(fp8, T, LinearPolicy::kAuto, 4, {128}, -1, rng);       // the later weights' refused
        run_case(fp8, T, LinearPolicy::kAuto, 4, {}, 384, rng);         // the first matmul fails once
        run_case(fp8, T, LinearPolicy::kAuto, 4, {}, 128, rng);         // a later matmul fails once
        run_case(cases[1], T, LinearPolicy::kAuto, 4, {256}, -1, rng);  // first refused, f32 beside
        run_case(cases[5], T, LinearPolicy::kAuto, 4, {128}, -1, rng);  // the middle one refused
        run_case(cases[5], T, LinearPolicy::kAuto, 4, {384, 128}, -1, rng);
    }
    std::printf("\n%s (%d failed)\n", g_failures == 0 ? "ALL PASS" : "SOME FAILED", g_failures);
    return g_failures == 0 ? 0 : 1;
}

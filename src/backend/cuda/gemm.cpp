// cuBLASLt dense linears (see gemm.h).
#include "backend/cuda/gemm.h"

#include <array>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <initializer_list>

#include "backend/cuda/basic_kernels.h"
#include "backend/cuda/int4_linear_kernels.h"
#include "backend/cuda/small_linear_kernels.h"
#include "backend/cuda/cuda_check.h"
#include "core/check.h"

#define QS_CUBLAS_CHECK(expr)                                                                          \
    do {                                                                                               \
        cublasStatus_t qs_st_ = (expr);                                                                \
        if (qs_st_ != CUBLAS_STATUS_SUCCESS) {                                                         \
            std::fprintf(stderr, "%s:%d: cuBLASLt error %d (%s)\n", __FILE__, __LINE__, int(qs_st_), #expr); \
            std::abort();                                                                              \
        }                                                                                              \
    } while (0)

namespace qs::cuda {

namespace {
// Whether CudaOptions::int4_linear_version puts a 4-bit format's small-rows launches on tensor cores
// (int4_linear_mma.cu): INT4 from version 3, NVFP4 at version 4.
bool int4_mma_version(int version, bool nvfp4) { return nvfp4 ? version == 4 : version >= 3; }
}  // namespace

namespace {
constexpr size_t kWorkspaceBytes = size_t(64) << 20;
constexpr cudaDataType_t kFp8Key = CUDA_R_8F_E4M3;  // marks block-scaled plans in plans_
}

Gemm::Gemm() : workspace_(kWorkspaceBytes) {
    QS_CUBLAS_CHECK(cublasLtCreate(&handle_));
    int device = 0;
    QS_CUDA_CHECK(cudaGetDevice(&device));
    QS_CUDA_CHECK(cudaDeviceGetAttribute(&sm_count_, cudaDevAttrMultiProcessorCount, device));
}

Gemm::~Gemm() {
    for (auto& [key, p] : plans_) destroy(p);
    if (handle_) cublasLtDestroy(handle_);
}

void Gemm::destroy(Plan& p) {
    if (p.a) cublasLtMatrixLayoutDestroy(p.a);
    if (p.b) cublasLtMatrixLayoutDestroy(p.b);
    if (p.d) cublasLtMatrixLayoutDestroy(p.d);
    if (p.op) cublasLtMatmulDescDestroy(p.op);
    p.a = p.b = p.d = nullptr;
    p.op = nullptr;
}

std::vector<float> fp8_blk128_scales(const float* scale_inv, int64_t out, int64_t in) {
    QS_CHECK(out % 128 == 0 && in % 128 == 0);
    const int64_t rows = out / 128, cols = in / 128, ld = fp8_blk128_ld(in);
    std::vector<float> padded(size_t(rows * ld), 0.0f);
    for (int64_t r = 0; r < rows; ++r) std::memcpy(padded.data() + r * ld, scale_inv + r * cols, size_t(cols) * 4);
    return padded;
}

bool Gemm::fp8_block_scaling_expected(int device) {
    cudaDeviceProp prop{};
    if (cudaGetDeviceProperties(&prop, device) != cudaSuccess) return false;
    return prop.major == 9 && cublasLtGetVersion() >= 120900;
}

Gemm::Fp8PlanInfo Gemm::fp8_plan_info(int64_t out, int64_t in, int64_t T) const {
    Fp8PlanInfo info;
    auto it = plans_.find(Key{int(kFp8Key), out, fp8_padded_rows(T), in});
    if (it == plans_.end()) return info;
    info.planned = true;
    info.ok = it->second.ok;
    info.d_type = it->second.d_type;
    return info;
}

const Gemm::Plan& Gemm::plan(cudaDataType_t ab_type, int64_t m, int64_t n, int64_t k) {
    const Key key{int(ab_type), m, n, k};
    auto it = plans_.find(key);
    if (it != plans_.end()) return it->second;
    Plan p;
    // Column-major view: A = W as [k, m] (ld k) transposed; B = x as [k, n] (ld k); D = y as [m, n].
    QS_CUBLAS_CHECK(cublasLtMatmulDescCreate(&p.op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    const cublasOperation_t trans_a = CUBLAS_OP_T, trans_b = CUBLAS_OP_N;
    QS_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_TRANSA, &trans_a, sizeof(trans_a)));
    QS_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_TRANSB, &trans_b, sizeof(trans_b)));
    QS_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.a, ab_type, uint64_t(k), uint64_t(m), k));
    QS_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.b, ab_type, uint64_t(k), uint64_t(n), k));
    QS_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.d, CUDA_R_32F, uint64_t(m), uint64_t(n), m));
    cublasLtMatmulPreference_t pref;
    QS_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
    const size_t ws = kWorkspaceBytes;
    QS_CUBLAS_CHECK(
        cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)));
    cublasLtMatmulHeuristicResult_t result{};
    int found = 0;
    QS_CUBLAS_CHECK(cublasLtMatmulAlgoGetHeuristic(handle_, p.op, p.a, p.b, p.d, p.d, pref, 1, &result, &found));
    cublasLtMatmulPreferenceDestroy(pref);
    QS_CHECK_MSG(found > 0, "cuBLASLt found no algorithm for this GEMM shape");
    p.algo = result.algo;
    return plans_.emplace(key, p).first->second;
}

void Gemm::matmul(cudaDataType_t ab_type, const void* w, const void* x, int64_t m, int64_t n, int64_t k, float* y,
                  cudaStream_t stream) {
    const Plan& p = plan(ab_type, m, n, k);
    const float alpha = 1.0f, beta = 0.0f;
    QS_CUBLAS_CHECK(cublasLtMatmul(handle_, p.op, &alpha, w, p.a, x, p.b, &beta, y, p.d, y, p.d, &p.algo,
                                   workspace_.get(), workspace_.bytes(), stream));
}

// Column-major view as in plan(): A = W as [k, m] (ld k) transposed, B = x as [k, n] (ld k),
// D = y as [m, n] (ld m). Scales (cuBLASLt's layouts for K-major operands): A BLK128x128_32F,
// [m/128 blocks][round_up(k/128, 4)], the k block fastest; B VEC128_32F, [k/128][n], n fastest
// (n is padded to a multiple of 4 so this leading dimension is 16-byte aligned). Every call
// below that can fail for lack of support is checked softly: a refusal is a fallback, not an abort.
bool Gemm::try_fp8_block_plan(Plan& p, cudaDataType_t d_type, int64_t m, int64_t n, int64_t k, const float* a_scale,
                              const float* b_scale) {
    p.d_type = d_type;
    if (cublasLtMatmulDescCreate(&p.op, CUBLAS_COMPUTE_32F, CUDA_R_32F) != CUBLAS_STATUS_SUCCESS) return false;
    const cublasOperation_t trans_a = CUBLAS_OP_T, trans_b = CUBLAS_OP_N;
    const int32_t a_mode = CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F, b_mode = CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F;
    auto set = [&](cublasLtMatmulDescAttributes_t attr, const void* v, size_t bytes) {
        return cublasLtMatmulDescSetAttribute(p.op, attr, v, bytes) == CUBLAS_STATUS_SUCCESS;
    };
    if (!set(CUBLASLT_MATMUL_DESC_TRANSA, &trans_a, sizeof(trans_a)) ||
        !set(CUBLASLT_MATMUL_DESC_TRANSB, &trans_b, sizeof(trans_b)) ||
        !set(CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &a_mode, sizeof(a_mode)) ||
        !set(CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &b_mode, sizeof(b_mode)) ||
        !set(CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &a_scale, sizeof(a_scale)) ||
        !set(CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &b_scale, sizeof(b_scale)))
        return false;
    if (cublasLtMatrixLayoutCreate(&p.a, CUDA_R_8F_E4M3, uint64_t(k), uint64_t(m), k) != CUBLAS_STATUS_SUCCESS ||
        cublasLtMatrixLayoutCreate(&p.b, CUDA_R_8F_E4M3, uint64_t(k), uint64_t(n), k) != CUBLAS_STATUS_SUCCESS ||
        cublasLtMatrixLayoutCreate(&p.d, d_type, uint64_t(m), uint64_t(n), m) != CUBLAS_STATUS_SUCCESS)
        return false;
    cublasLtMatmulPreference_t pref;
    if (cublasLtMatmulPreferenceCreate(&pref) != CUBLAS_STATUS_SUCCESS) return false;
    const size_t ws = kWorkspaceBytes;
    cublasLtMatmulHeuristicResult_t result{};
    int found = 0;
    const bool ok =
        cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)) ==
            CUBLAS_STATUS_SUCCESS &&
        cublasLtMatmulAlgoGetHeuristic(handle_, p.op, p.a, p.b, p.d, p.d, pref, 1, &result, &found) ==
            CUBLAS_STATUS_SUCCESS &&
        found > 0;
    cublasLtMatmulPreferenceDestroy(pref);
    if (ok) p.algo = result.algo;
    return ok;
}

Gemm::Plan& Gemm::fp8_block_plan(int64_t m, int64_t n, int64_t k, const float* a_scale, const float* b_scale) {
    const Key key{int(kFp8Key), m, n, k};
    auto it = plans_.find(key);
    if (it != plans_.end()) return it->second;
    Plan p;
    p.ok = false;
    for (cudaDataType_t d_type : {CUDA_R_32F, CUDA_R_16BF}) {
        if (try_fp8_block_plan(p, d_type, m, n, k, a_scale, b_scale)) {
            p.ok = true;
            break;
        }
        destroy(p);
    }
    if (!p.ok)
        std::fprintf(stderr,
                     "qwenserve: cuBLASLt has no block-scaled FP8 algorithm for out=%lld in=%lld T=%lld (cuBLASLt %zu); "
                     "this shape uses the dequantise-to-bf16 path\n",
                     (long long)m, (long long)k, (long long)n, cublasLtGetVersion());
    return plans_.emplace(key, p).first->second;
}

bool Gemm::linear_fp8_block(const DeviceLinear& w, const float* x, int64_t T, float* y, QuantisedInput& xq,
                            DeviceArena& scratch, cudaStream_t stream) {
    const int64_t m = w.out, k = w.in, n = fp8_padded_rows(T);
    const DeviceArena::Mark mark = scratch.mark();
    const bool made_here = xq.q == nullptr;
    if (made_here) {
        xq.q = static_cast<uint8_t*>(scratch.allocate(size_t(n * k)));                // [n, k] e4m3
        xq.scales = static_cast<float*>(scratch.allocate(size_t(n * (k / 128)) * 4));  // [k/128, n]
    }
    Plan& p = fp8_block_plan(m, n, k, w.scale_blk, xq.scales);
    if (!p.ok) {
        if (made_here) {
            scratch.release_to(mark);
            xq = {};
        }
        return false;
    }
    QS_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &w.scale_blk,
                                                   sizeof(w.scale_blk)));
    QS_CUBLAS_CHECK(
        cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &xq.scales, sizeof(xq.scales)));
    // D: y itself when no row is padded and D is fp32, else a scratch whose first T rows are y's.
    void* d = y;
    if (p.d_type != CUDA_R_32F || n != T) d = scratch.allocate(size_t(m * n) * (p.d_type == CUDA_R_32F ? 4 : 2));
    if (!xq.filled) {
        launch_quant_fp8_rows128(x, T, k, n, xq.q, xq.scales, stream);
        xq.filled = true;
    } else {
        ++shared_input_reuses_;
    }
    const float alpha = 1.0f, beta = 0.0f;
    const cublasStatus_t st = cublasLtMatmul(handle_, p.op, &alpha, w.w, p.a, xq.q, p.b, &beta, d, p.d, d, p.d,
                                             &p.algo, workspace_.get(), workspace_.bytes(), stream);
    if (st != CUBLAS_STATUS_SUCCESS) {
        std::fprintf(stderr,
                     "qwenserve: block-scaled FP8 cublasLtMatmul failed (status %d) for out=%lld in=%lld T=%lld; "
                     "this shape uses the dequantise-to-bf16 path from now on\n",
                     int(st), (long long)m, (long long)k, (long long)T);
        p.ok = false;
        return false;
    }
    if (p.d_type == CUDA_R_16BF) launch_bf16_to_f32(static_cast<const uint16_t*>(d), T * m, y, stream);
    else if (d != y)
        QS_CUDA_CHECK(cudaMemcpyAsync(y, d, size_t(T * m) * 4, cudaMemcpyDeviceToDevice, stream));
    return true;
}

void Gemm::linear_fp8_dequant(const DeviceLinear& w, const float* x, int64_t T, float* y, DeviceArena& scratch,
                              cudaStream_t stream) {
    auto* wb = static_cast<uint16_t*>(scratch.allocate(size_t(w.out * w.in) * 2));  // [out, in] bf16
    launch_dequant_fp8_block(static_cast<const uint8_t*>(w.w), w.scale_inv, w.out, w.in, wb, stream);
    auto* xb = static_cast<uint16_t*>(scratch.allocate(size_t(T * w.in) * 2));
    launch_f32_to_bf16(x, T * w.in, xb, stream);
    matmul(CUDA_R_16BF, wb, xb, w.out, T, w.in, y, stream);
}

Gemm::Route Gemm::route(const DeviceLinear& w, const float* x, int64_t T) const {
    switch (w.dtype) {
        case DeviceLinear::Dtype::kF32:
            if (policy_ == LinearPolicy::kAuto && small_linear_f32_supports(T, w.in, w.w, x)) return Route::kSmallRowsF32;
            if (policy_ == LinearPolicy::kAuto && T <= f32_tiles_max_rows_ && T * w.out <= kF32LinearTilesMaxOutputs &&
                f32_linear_tiles_supports(T, w.in, w.w, x))
                return Route::kTilesF32;
            return Route::kF32;
        case DeviceLinear::Dtype::kBF16:
            if (policy_ == LinearPolicy::kAuto && w.int4_codes && w.nvfp4 &&
                nvfp4_linear_supports(T, w.in, w.int4_codes, x))
                return Route::kNvfp4;
            if (policy_ == LinearPolicy::kAuto && w.int4_codes && !w.nvfp4 &&
                int4_linear_supports(T, w.in, w.int4_group, w.int4_codes, x))
                return Route::kInt4;
            if (policy_ == LinearPolicy::kAuto && small_linear_supports(false, T, w.in, w.w, x)) return Route::kSmallRows;
            return Route::kBf16Gemm;
        case DeviceLinear::Dtype::kFP8Block: {
            if (policy_ == LinearPolicy::kAuto && T <= fp8_small_rows_ && small_linear_fp8_v2_supports(T, w.in, w.w, x))
                return Route::kSmallRowsFp8V2;
            if (policy_ == LinearPolicy::kAuto && small_linear_supports(true, T, w.in, w.w, x)) return Route::kSmallRows;
            const bool block_shape = w.scale_blk != nullptr && w.out % 128 == 0 && w.in % 128 == 0;
            if (policy_ != LinearPolicy::kDequantOnly && block_shape) return Route::kFp8Block;
            return Route::kFp8Dequant;
        }
    }
    return Route::kF32;
}

void Gemm::linear(const DeviceLinear& w, const float* x, int64_t T, float* y, DeviceArena& scratch,
                  cudaStream_t stream) {
    const DeviceLinear* ws[1] = {&w};
    float* ys[1] = {y};
    linears(x, T, ws, ys, scratch, stream);
}

void Gemm::linears(const float* x, int64_t T, std::span<const DeviceLinear* const> ws, std::span<float* const> ys,
                   DeviceArena& scratch, cudaStream_t stream) {
    linears_on(x, T, ws, ys, scratch, stream, nullptr, nullptr);
}

void Gemm::linears(const float* x, int64_t T, std::span<const DeviceLinear* const> ws, std::span<float* const> ys,
                   DeviceArena& scratch, cudaStream_t stream, const QuantisedInput& preset) {
    linears_on(x, T, ws, ys, scratch, stream, nullptr, nullptr, &preset);
}

Gemm::QuantisedInput Gemm::norm_for_linears(const float* x, const SmallLinearInputNorm& norm, int64_t T,
                                            std::span<const DeviceLinear* const> ws, DeviceArena& scratch,
                                            cudaStream_t stream) {
    QS_CHECK(!ws.empty() && norm.h != nullptr && norm.w != nullptr);
    const int64_t in = ws[0]->in;
    bool block_scaled = false;
    for (const DeviceLinear* w : ws) block_scaled = block_scaled || route(*w, norm.h, T) == Route::kFp8Block;
    QuantisedInput xq;
    // (The block-scaled route takes only in % 128 == 0: whole quantisation groups.)
    if (!norm_quant_ || !block_scaled || T == 0) {
        launch_residual_rms_norm_zc(x, norm.pending, nullptr, nullptr, norm.w, T, in, norm.eps, norm.h, stream);
        return xq;
    }
    const int64_t n = fp8_padded_rows(T);
    xq.q = static_cast<uint8_t*>(scratch.allocate(size_t(n * in)));                // [n, in] e4m3
    xq.scales = static_cast<float*>(scratch.allocate(size_t(n * (in / 128)) * 4));  // [in/128, n]
    launch_residual_rms_norm_quant(x, norm.pending, nullptr, nullptr, norm.w, T, in, norm.eps, norm.h, n, xq.q,
                                   xq.scales, stream);
    xq.filled = true;
    ++norm_quants_;
    return xq;
}

bool Gemm::norm_linears(const float* x, const SmallLinearInputNorm& norm, bool fused, int64_t T,
                        std::span<const DeviceLinear* const> ws, std::span<float* const> ys, DeviceArena& scratch,
                        cudaStream_t stream) {
    QS_CHECK(!ws.empty() && norm.h != nullptr && norm.w != nullptr);
    const int64_t in = ws[0]->in;
    // The fused launch reads x where the other launches read h (the same alignment rules).
    bool fuse = fused && small_linear_fp8_v2_norm_supports(T, in) && reinterpret_cast<uintptr_t>(x) % 16 == 0;
    if (fuse) {
        fuse = false;
        for (const DeviceLinear* w : ws) fuse = fuse || route(*w, norm.h, T) == Route::kSmallRowsFp8V2;
    }
    if (!fuse) {
        launch_residual_rms_norm_zc(x, norm.pending, nullptr, nullptr, norm.w, T, in, norm.eps, norm.h, stream);
        linears_on(norm.h, T, ws, ys, scratch, stream, nullptr, nullptr);
        return false;
    }
    linears_on(norm.h, T, ws, ys, scratch, stream, x, &norm);
    return true;
}

bool Gemm::linear_norm(const DeviceLinear& w, const float* a, int64_t T, float* y, const SmallLinearOutputNorm& post,
                       bool fused, DeviceArena& scratch, cudaStream_t stream) {
    const Route r4 = route(w, a, T);
    if (fused && int4_linear_version_ >= 2 && (r4 == Route::kInt4 || r4 == Route::kNvfp4) &&
        int4_linear_output_norm_supports(T, w.out)) {
        const bool nvfp4 = r4 == Route::kNvfp4;
        const Int4LinearPart part{w.int4_codes, w.int4_scales, w.out, y, nvfp4 ? w.nvfp4_global : 1.0f};
        const int64_t group = nvfp4 ? kNvfp4LinearGroup : w.int4_group;
        if (int4_mma_version(int4_linear_version_, nvfp4) && int4_linear_mma_supports(nvfp4, T, w.in, group, std::span(&part, 1), a)) {
            launch_int4_linears_mma(nvfp4, std::span(&part, 1), w.in, group, a, T, stream, &post);
            ++int4_mma_launches_;
        } else {
            launch_4bit_linears(nvfp4, std::span(&part, 1), w.in, group, a, T, stream, &post);
        }
        ++int4_calls_;
        ++int4_launches_;
        if (nvfp4) ++nvfp4_calls_;
        return true;
    }
    const SmallLinearFp8Part part{w.w, w.scale_inv, w.out, y};
    const bool small = fused && route(w, a, T) == Route::kSmallRowsFp8V2;
    const bool v3 = small && fp8_small_version_ == 3 && small_linear_fp8_mma_supports(T, w.in, std::span(&part, 1), a) &&
                    small_linear_fp8_mma_output_norm_supports(T, w.in, w.out);
    if (small && (v3 || small_linear_fp8_v2_output_norm_supports(T, w.out))) {
        if (v3) {
            launch_small_linear_fp8_mma_output_norm(part, w.in, a, T, post, stream, fp8_small_v3_blocks_per_sm_);
            ++fp8_counts_.small_rows_v3_launches;
        } else {
            launch_small_linear_fp8_v2_output_norm(part, w.in, a, T, post, stream, fp8_small_blocks_per_sm_);
        }
        ++small_rows_calls_;
        last_fp8_path_ = Fp8Path::kSmallRows;
        ++fp8_counts_.small_rows;
        ++fp8_counts_.small_rows_v2;
        ++fp8_counts_.small_rows_v2_launches;
        return true;
    }
    linear(w, a, T, y, scratch, stream);
    launch_residual_rms_norm_zc(post.x, post.pending, y, post.x, post.w, T, w.out, post.eps, post.h, stream);
    return false;
}

void Gemm::linears_on(const float* x, int64_t T, std::span<const DeviceLinear* const> ws, std::span<float* const> ys,
                      DeviceArena& scratch, cudaStream_t stream, const float* x_raw,
                      const SmallLinearInputNorm* norm, const QuantisedInput* preset) {
    QS_CHECK(ws.size() == ys.size());
    if (T == 0 || ws.empty()) return;
    const int64_t in = ws[0]->in;
    uint16_t* xb = nullptr;  // [T, in] bf16: x for the bf16 GEMMs, made at the first one
    // x for the block-scaled GEMMs: the preset (made by the input norm), else made at the first one.
    QuantisedInput xq = preset != nullptr && preset->filled ? *preset : QuantisedInput{};
    auto count_small_rows = [&](bool fp8) {
        ++small_rows_calls_;
        if (!fp8) return;
        last_fp8_path_ = Fp8Path::kSmallRows;
        ++fp8_counts_.small_rows;
    };
    for (size_t i = 0; i < ws.size(); ++i)
        QS_CHECK_MSG(ws[i]->in == in, "Gemm::linears: the weights take inputs of different widths");
    // First the weights of the small-rows kernels that take several a launch, gathered up to
    // N = parts.size() per launch: make(w, y) is one weight's part, launch(parts) one launch.
    auto gathered = [&]<class Part, size_t N>(Route r, std::array<Part, N>& parts, auto make, auto launch) {
        size_t count = 0;
        for (size_t i = 0; i < ws.size(); ++i) {
            if (route(*ws[i], x, T) != r) continue;
            parts[count++] = make(*ws[i], ys[i]);
            if (count == N) {
                launch(std::span<const Part>(parts.data(), count));
                count = 0;
            }
        }
        if (count > 0) launch(std::span<const Part>(parts.data(), count));
    };
    // The FP8 weights of version 2 (q/k/v; the GDN qkv/z) first: with the input norm, the first
    // launch writes the h that every other launch of the call reads.
    std::array<SmallLinearFp8Part, kSmallLinearFp8V2MaxParts> fp8_parts;
    gathered(
        Route::kSmallRowsFp8V2, fp8_parts,
        [](const DeviceLinear& w, float* y) { return SmallLinearFp8Part{w.w, w.scale_inv, w.out, y}; },
        [&](std::span<const SmallLinearFp8Part> parts) {
            if (norm != nullptr) {
                if (fp8_small_version_ == 3 && small_linear_fp8_mma_supports(T, in, parts, x_raw) &&
                    small_linear_fp8_mma_norm_supports(T, in)) {
                    launch_small_linear_fp8_mma(parts, in, x_raw, T, stream, fp8_small_v3_blocks_per_sm_, norm);
                    ++fp8_counts_.small_rows_v3_launches;
                } else {
                    launch_small_linear_fp8_v2(parts, in, x_raw, T, stream, fp8_small_blocks_per_sm_, norm);
                }
                norm = nullptr;
            } else if (fp8_small_version_ == 3 && small_linear_fp8_mma_supports(T, in, parts, x)) {
                launch_small_linear_fp8_mma(parts, in, x, T, stream, fp8_small_v3_blocks_per_sm_);
                ++fp8_counts_.small_rows_v3_launches;
            } else {
                launch_small_linear_fp8_v2(parts, in, x, T, stream, fp8_small_blocks_per_sm_);
            }
            for (size_t j = 0; j < parts.size(); ++j) count_small_rows(true);
            fp8_counts_.small_rows_v2 += int64_t(parts.size());
            ++fp8_counts_.small_rows_v2_launches;
        });
    // Then the F32 weights (the GDN b/a projections; the router with the shared-expert gate): the small-rows
    // kernel at T <= 8, the tiled one above where set_f32_tiles_max_rows allows (the same bits per row).
    std::array<SmallLinearF32Part, kSmallLinearF32MaxParts> f32_parts;  // no allocation per call
    gathered(
        Route::kSmallRowsF32, f32_parts,
        [](const DeviceLinear& w, float* y) { return SmallLinearF32Part{static_cast<const float*>(w.w), w.out, y}; },
        [&](std::span<const SmallLinearF32Part> parts) {
            launch_small_linear_f32(parts, in, x, T, stream);
            small_rows_f32_weights_ += int64_t(parts.size());
            small_rows_calls_ += int64_t(parts.size());
            ++small_rows_f32_launches_;
        });
    gathered(
        Route::kTilesF32, f32_parts,
        [](const DeviceLinear& w, float* y) { return SmallLinearF32Part{static_cast<const float*>(w.w), w.out, y}; },
        [&](std::span<const SmallLinearF32Part> parts) {
            launch_f32_linear_tiles(parts, in, x, T, stream, -1, sm_count_);
            f32_tiles_weights_ += int64_t(parts.size());
            ++f32_tiles_launches_;
        });
    // Versions 2 and 3 of the 4-bit kernels: their weights share launches (up to kInt4LinearMaxParts of
    // one format and group each, consecutive in ws); version 3 on tensor cores where it takes them.
    const bool int4_grouped = int4_linear_version_ >= 2;
    if (int4_grouped) {
        std::array<Int4LinearPart, kInt4LinearMaxParts> int4_parts;
        for (const bool nvfp4 : {false, true}) {
            const Route r4 = nvfp4 ? Route::kNvfp4 : Route::kInt4;
            size_t count = 0;
            int64_t group = 0;
            auto flush = [&] {
                if (count == 0) return;
                const std::span<const Int4LinearPart> parts(int4_parts.data(), count);
                if (int4_mma_version(int4_linear_version_, nvfp4) && int4_linear_mma_supports(nvfp4, T, in, group, parts, x)) {
                    launch_int4_linears_mma(nvfp4, parts, in, group, x, T, stream);
                    ++int4_mma_launches_;
                } else {
                    launch_4bit_linears(nvfp4, parts, in, group, x, T, stream);
                }
                int4_calls_ += int64_t(count);
                if (nvfp4) nvfp4_calls_ += int64_t(count);
                ++int4_launches_;
                count = 0;
            };
            for (size_t i = 0; i < ws.size(); ++i) {
                const DeviceLinear& w = *ws[i];
                if (route(w, x, T) != r4) continue;
                const int64_t g = nvfp4 ? kNvfp4LinearGroup : w.int4_group;
                if (count == int4_parts.size() || (count > 0 && g != group)) flush();
                group = g;
                int4_parts[count++] = Int4LinearPart{w.int4_codes, w.int4_scales, w.out, ys[i], nvfp4 ? w.nvfp4_global : 1.0f};
            }
            flush();
        }
    }
    for (size_t i = 0; i < ws.size(); ++i) {
        const DeviceLinear& w = *ws[i];
        float* y = ys[i];
        const bool fp8 = w.dtype == DeviceLinear::Dtype::kFP8Block;
        Route r = route(w, x, T);
        if (r == Route::kSmallRowsF32 || r == Route::kTilesF32 || r == Route::kSmallRowsFp8V2) continue;  // done above
        if (int4_grouped && (r == Route::kInt4 || r == Route::kNvfp4)) continue;  // done above
        if (r == Route::kFp8Block) {
            if (linear_fp8_block(w, x, T, y, xq, scratch, stream)) {
                last_fp8_path_ = Fp8Path::kBlockScaled;
                ++fp8_counts_.block_scaled;
                continue;
            }
            r = Route::kFp8Dequant;
        }
        switch (r) {
            case Route::kF32:
                matmul(CUDA_R_32F, w.w, x, w.out, T, w.in, y, stream);
                break;
            case Route::kInt4:
                launch_int4_linear(w.int4_codes, static_cast<const uint16_t*>(w.int4_scales), w.out, w.in, w.int4_group, x, T, y, stream);
                ++int4_calls_;
                ++int4_launches_;
                break;
            case Route::kNvfp4:
                launch_nvfp4_linear(w.int4_codes, static_cast<const uint8_t*>(w.int4_scales), w.nvfp4_global, w.out, w.in, x, T, y, stream);
                ++int4_calls_;
                ++nvfp4_calls_;
                ++int4_launches_;
                break;
            case Route::kSmallRows:
                launch_small_linear(w.w, fp8, fp8 ? w.scale_inv : nullptr, w.out, w.in, x, T, y, stream);
                count_small_rows(fp8);
                break;
            case Route::kBf16Gemm:
                if (xb == nullptr) {
                    xb = static_cast<uint16_t*>(scratch.allocate(size_t(T * in) * 2));
                    launch_f32_to_bf16(x, T * in, xb, stream);
                } else {
                    ++shared_input_reuses_;
                }
                matmul(CUDA_R_16BF, w.w, xb, w.out, T, w.in, y, stream);
                break;
            case Route::kFp8Dequant:
                linear_fp8_dequant(w, x, T, y, scratch, stream);
                last_fp8_path_ = Fp8Path::kDequant;
                ++fp8_counts_.dequant;
                break;
            case Route::kFp8Block:
            case Route::kSmallRowsF32:
            case Route::kTilesF32:
            case Route::kSmallRowsFp8V2:
                break;  // handled above
        }
    }
    QS_CHECK_MSG(norm == nullptr, "Gemm::linears: the input norm had no FP8 small-rows launch to ride on");
}

}  // namespace qs::cuda

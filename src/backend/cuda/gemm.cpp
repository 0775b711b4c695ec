// cuBLASLt dense linears (see gemm.h).
#include "backend/cuda/gemm.h"

#include <cstdio>
#include <cstdlib>

#include "backend/cuda/basic_kernels.h"
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
constexpr size_t kWorkspaceBytes = size_t(64) << 20;
}

Gemm::Gemm() : workspace_(kWorkspaceBytes) { QS_CUBLAS_CHECK(cublasLtCreate(&handle_)); }

Gemm::~Gemm() {
    for (auto& [key, p] : plans_) {
        cublasLtMatrixLayoutDestroy(p.a);
        cublasLtMatrixLayoutDestroy(p.b);
        cublasLtMatrixLayoutDestroy(p.d);
        cublasLtMatmulDescDestroy(p.op);
    }
    if (handle_) cublasLtDestroy(handle_);
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

void Gemm::linear(const DeviceLinear& w, const float* x, int64_t T, float* y, DeviceArena& scratch,
                  cudaStream_t stream) {
    if (T == 0) return;
    switch (w.dtype) {
        case DeviceLinear::Dtype::kF32:
            matmul(CUDA_R_32F, w.w, x, w.out, T, w.in, y, stream);
            return;
        case DeviceLinear::Dtype::kBF16: {
            auto* xb = static_cast<uint16_t*>(scratch.allocate(size_t(T * w.in) * 2));  // [T, in] bf16
            launch_f32_to_bf16(x, T * w.in, xb, stream);
            matmul(CUDA_R_16BF, w.w, xb, w.out, T, w.in, y, stream);
            return;
        }
        case DeviceLinear::Dtype::kFP8Block: {
            auto* wb = static_cast<uint16_t*>(scratch.allocate(size_t(w.out * w.in) * 2));  // [out, in] bf16
            launch_dequant_fp8_block(static_cast<const uint8_t*>(w.w), w.scale_inv, w.out, w.in, wb, stream);
            auto* xb = static_cast<uint16_t*>(scratch.allocate(size_t(T * w.in) * 2));
            launch_f32_to_bf16(x, T * w.in, xb, stream);
            matmul(CUDA_R_16BF, wb, xb, w.out, T, w.in, y, stream);
            return;
        }
    }
}

}  // namespace qs::cuda

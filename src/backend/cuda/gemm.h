// Dense linear layers on the GPU through cuBLASLt: y [T, out] (fp32) = x [T, in] (fp32) · Wᵀ for a
// weight W [out, in] in device memory. BF16 weights: x is rounded to bf16 (one kernel) and the
// product accumulates in fp32 on the tensor cores. F32 weights (test fixtures, the router):
// fp32 GEMM without TF32. FP8 128×128-block weights: dequantised to a bf16 scratch, then the
// bf16 path (correct, not yet fast). Plans (descriptors + heuristic algorithm) are cached per
// shape. CPU reference: cpu::linear. Used from the engine thread.
#pragma once

#include <cstdint>
#include <map>
#include <tuple>

#include <cublasLt.h>
#include <cuda_runtime.h>

#include "backend/cuda/device_memory.h"

namespace qs::cuda {

struct DeviceLinear {
    enum class Dtype : uint8_t { kF32, kBF16, kFP8Block };
    Dtype dtype = Dtype::kBF16;
    const void* w = nullptr;          // [out, in] in dtype
    const float* scale_inv = nullptr; // kFP8Block: [ceil(out/128), ceil(in/128)]
    int64_t out = 0, in = 0;
};

class Gemm {
public:
    Gemm();
    ~Gemm();
    Gemm(const Gemm&) = delete;
    Gemm& operator=(const Gemm&) = delete;

    // y [T, w.out] = x [T, w.in] · Wᵀ; scratch for the bf16 copy of x (and of W for FP8).
    void linear(const DeviceLinear& w, const float* x, int64_t T, float* y, DeviceArena& scratch,
                cudaStream_t stream);

private:
    struct Plan {
        cublasLtMatmulDesc_t op = nullptr;
        cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
        cublasLtMatmulAlgo_t algo{};
    };
    using Key = std::tuple<int, int64_t, int64_t, int64_t>;  // (input dtype, m=out, n=T, k=in)
    const Plan& plan(cudaDataType_t ab_type, int64_t m, int64_t n, int64_t k);
    void matmul(cudaDataType_t ab_type, const void* w, const void* x, int64_t m, int64_t n, int64_t k, float* y,
                cudaStream_t stream);

    cublasLtHandle_t handle_ = nullptr;
    DeviceBuffer workspace_;
    std::map<Key, Plan> plans_;
};

}  // namespace qs::cuda

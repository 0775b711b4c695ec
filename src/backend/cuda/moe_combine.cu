// MoE stage 5 (see moe_kernels.cu for the whole pipeline): the deterministic combine
// y_t = Σ_j w_tj · eout[t·k+j] (in j order) + σ(sg_t) · eout[T·k+t]. CPU reference:
// src/backend/cpu/cpu_moe.cpp.
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/moe_common.cuh"

namespace qs::cuda::moe {
namespace {

// ---------------------------------------------------------------------------------------------
// 5. Combine
// ---------------------------------------------------------------------------------------------

// Four consecutive values of eout row `row` from column 4c: fp32, or bf16 (CombineParams::eout16).
template <bool BF16>
__device__ __forceinline__ float4 eout4(const CombineParams& p, size_t row, int c) {
    if constexpr (BF16) {
        const uint2 u = reinterpret_cast<const uint2*>(p.eout16 + row * p.H)[c];
        return make_float4(__uint_as_float(u.x << 16), __uint_as_float(u.x & 0xffff0000u), __uint_as_float(u.y << 16),
                           __uint_as_float(u.y & 0xffff0000u));
    } else {
        return reinterpret_cast<const float4*>(p.eout + row * p.H)[c];
    }
}

template <bool BF16>
__global__ __launch_bounds__(kCombineThreads) void moe_combine_kernel(CombineParams p) {
    const int t = blockIdx.x;
    const int h4 = p.H / 4;
    const float sg = 1.0f / (1.0f + expf(-p.shared_gate_logit[t]));
    float4* y = reinterpret_cast<float4*>(p.y + size_t(t) * p.H);
    for (int c = threadIdx.x; c < h4; c += kCombineThreads) {
        float4 acc = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        for (int j = 0; j < p.k; ++j) {
            const float w = p.topk_w[size_t(t) * p.k + j];
            const float4 v = eout4<BF16>(p, size_t(t) * p.k + j, c);
            acc.x += w * v.x;
            acc.y += w * v.y;
            acc.z += w * v.z;
            acc.w += w * v.w;
        }
        const float4 s = eout4<BF16>(p, size_t(p.T) * p.k + t, c);
        acc.x += sg * s.x;
        acc.y += sg * s.y;
        acc.z += sg * s.z;
        acc.w += sg * s.w;
        y[c] = acc;
    }
}

}  // namespace

#if !defined(QS_MOE_EMULATE)
void launch_combine(const MoePlan& pl, cudaStream_t stream) {
    if (pl.combine.eout16 != nullptr) moe_combine_kernel<true><<<pl.combine_grid, kCombineThreads, 0, stream>>>(pl.combine);
    else moe_combine_kernel<false><<<pl.combine_grid, kCombineThreads, 0, stream>>>(pl.combine);
    QS_CUDA_CHECK_LAUNCH();
}
#endif

}  // namespace qs::cuda::moe

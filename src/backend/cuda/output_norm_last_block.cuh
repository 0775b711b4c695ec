// The post-attention norm computed by the last block to finish of a small-rows linear launch
// (SmallLinearOutputNorm): the FP8 small-rows kernels (small_linear_fp8.cu, small_linear_fp8_mma.cu)
// and the 4-bit ones (int4_linear_kernels.cu) call it once per block after their last store of y,
// so that x and h are the bits launch_residual_rms_norm_zc(x, pending, y, x, w, ...) writes after
// the launch (row_norm.cuh's arithmetic and thread mapping). Blocks of kNormThreads threads.
// Device code; also compiled by the host emulators.
#pragma once

#include "backend/cuda/row_norm.cuh"
#include "backend/cuda/small_linear_kernels.h"

namespace qs::cuda {

constexpr int kNormWarps = 8;
constexpr int kNormThreads = kNormWarps * 32;  // thread i owns elements i, i + 256, ... of a row

// The post-attention norm by the launch's last block (PER = out / 256): x += pending, x += y,
// h = rms_norm_zc(x) for the T rows. Every block of the launch calls it once, after its last
// store of y [T, n].
template <int T, int PER>
__device__ __forceinline__ void output_norm_last_block(const SmallLinearOutputNorm& nm, const float* y, int n) {
    __shared__ int s_last;
    __threadfence();  // this block's y before its count
    __syncthreads();
    if (threadIdx.x == 0) s_last = atomicAdd(nm.counter, 1) == int(gridDim.x) - 1 ? 1 : 0;
    __syncthreads();
    if (!s_last) return;
    __threadfence();  // every other block's y, fenced before its count, is visible now
    const int i = threadIdx.x;
    if (i == 0) *nm.counter = 0;  // ready for the next launch (the stream orders it)
#pragma unroll 1
    for (int t = 0; t < T; ++t) {
        float v[PER], wv[PER];
        float ss = 0.0f;
#pragma unroll
        for (int k = 0; k < PER; ++k) {
            const size_t c = size_t(t) * n + i + kNormThreads * k;
            v[k] = nm.x[c];
            if (nm.pending != nullptr) v[k] = v[k] + nm.pending[c];
            v[k] = v[k] + __ldcg(y + c);  // written by other blocks: from L2
            wv[k] = __ldg(nm.w + i + kNormThreads * k);
            ss += v[k] * v[k];
        }
        const float inv = rms_inv(block_sum(ss), n, nm.eps);
#pragma unroll
        for (int k = 0; k < PER; ++k) {
            const size_t c = size_t(t) * n + i + kNormThreads * k;
            nm.x[c] = v[k];
            nm.h[c] = norm_zc(v[k], inv, wv[k]);
        }
    }
}

}  // namespace qs::cuda

// The layer norms the FP8 small-rows kernels compute around their linear (version 2:
// small_linear_fp8.cu; version 3: small_linear_fp8_mma.cu), with row_norm.cuh's arithmetic and
// thread mapping, so that h and x are the bits the norm kernels would write:
//  - norm_quantise_x: step 1 with the input norm (SmallLinearInputNorm): h = rms_norm_zc(x +
//    pending) of the T rows, quantised to e4m3 by 128-column groups (the operations of
//    small_fp8::quantise_16), each code handed to the kernel's own store (its shared-memory layout);
//  - output_norm_last_block (output_norm_last_block.cuh, shared with the 4-bit kernels): the
//    post-attention norm (SmallLinearOutputNorm) by the launch's last block to finish.
// Blocks of kNormThreads threads. Device code; also compiled by the host emulator.
#pragma once

#include <cstdint>

#include "backend/cuda/output_norm_last_block.cuh"
#include "backend/cuda/row_norm.cuh"
#include "backend/cuda/small_linear_fp8_common.cuh"
#include "backend/cuda/small_linear_kernels.h"

namespace qs::cuda::small_fp8 {

// Step 1 with the input norm: h of the T rows (PER = in / 256 elements a thread) → the codes, via
// store(t, column, code value), and xscale [T][in / 128] (block 0 also writes h to nm.h). A
// 128-column group is one element of each of 128 consecutive threads (4 warps), its amax a max over
// them (exact in any order). Three barriers a row (two in block_sum, one for the groups' amax).
template <int T, int PER, typename Store>
__device__ __forceinline__ void norm_quantise_x(const float* __restrict__ x, const SmallLinearInputNorm& nm, int in,
                                                float* xscale, Store&& store) {
    __shared__ float warp_amax[T][PER][kNormWarps];
    const int i = threadIdx.x, lane = i & 31, warp = i >> 5, groups = in / 128;
    float wv[PER];
#pragma unroll
    for (int k = 0; k < PER; ++k) wv[k] = __ldg(nm.w + i + kNormThreads * k);
#pragma unroll 1
    for (int t = 0; t < T; ++t) {
        const float* xr = x + size_t(t) * in;
        const float* pr = nm.pending != nullptr ? nm.pending + size_t(t) * in : nullptr;
        float v[PER];
        float ss = 0.0f;
#pragma unroll
        for (int k = 0; k < PER; ++k) {
            const int c = i + kNormThreads * k;
            v[k] = __ldg(xr + c);
            if (pr != nullptr) v[k] = v[k] + __ldg(pr + c);
            ss += v[k] * v[k];
        }
        const float inv = rms_inv(block_sum(ss), in, nm.eps);
#pragma unroll
        for (int k = 0; k < PER; ++k) {
            v[k] = norm_zc(v[k], inv, wv[k]);
            if (blockIdx.x == 0) nm.h[size_t(t) * in + i + kNormThreads * k] = v[k];
            float amax = fabsf(v[k]);
#pragma unroll
            for (int off = 16; off > 0; off >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, off));
            if (lane == 0) warp_amax[t][k][warp] = amax;
        }
        __syncthreads();
        // Element c = i + 256 k is in group 2k + i / 128, whose amax is warps 4 (i / 128) .. + 3's.
        const int w0 = (i >> 7) * 4;
#pragma unroll
        for (int k = 0; k < PER; ++k) {
            const float amax = fmaxf(fmaxf(warp_amax[t][k][w0], warp_amax[t][k][w0 + 1]),
                                     fmaxf(warp_amax[t][k][w0 + 2], warp_amax[t][k][w0 + 3]));
            const float scale = amax > 0.0f ? __fdiv_rn(amax, 448.0f) : 1.0f;
            const int c = i + kNormThreads * k;
            store(t, c, quantise_pair(v[k], 0.0f, scale).x);
            if ((i & 127) == 0) xscale[t * groups + c / 128] = scale;
        }
    }
}

}  // namespace qs::cuda::small_fp8

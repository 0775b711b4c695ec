// The zero-centred RMSNorm's arithmetic, shared by the row kernels (basic_kernels.cu) and the
// kernels that compute a norm in their prologue (the FP8 small-rows linears with the layer's input
// norm: small_linear_fp8.cu), so that both give the same bits: a block of `blockDim.x` threads,
// thread i owning elements i, i + blockDim.x, ... of the row; each thread sums its squares in that
// order, block_sum adds the threads' sums by one fixed tree, inv = rsqrt(mean + eps), and an element
// becomes v · inv · (1 + w). Also compiles under the CPU emulators (bench/kernels/emu).
#pragma once

namespace qs::cuda {

// The sum of v over the block (every thread gets it). Two barriers: every thread of the block calls
// it; warp_sums is free again when it returns.
__device__ __forceinline__ float block_sum(float v) {
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

// 1 / RMS of a row of n elements whose squares sum to `sum_sq` (the block's total).
__device__ __forceinline__ float rms_inv(float sum_sq, int64_t n, float eps) {
    return rsqrtf(sum_sq / float(n) + eps);
}

// One element of the zero-centred norm's output.
__device__ __forceinline__ float norm_zc(float v, float inv, float w) { return v * inv * (1.0f + w); }

}  // namespace qs::cuda

// The row norm kernel's bits on the CPU emulator (emu_prelude.h), for the emulations of kernels that
// fuse a norm (small_linear_emu.cpp, int4_emu.cpp): basic_kernels.cu's add_rms_norm_zc_kernel mapping
// on row_norm.cuh's arithmetic, launched through the emulated ptx::launch_kernel.
#pragma once

#include <cstdint>

#include "backend/cuda/ptx_helpers.cuh"  // the emulator's (bench/kernels/emu/backend)
#include "backend/cuda/row_norm.cuh"

namespace emu_norm {

// h = rms_norm_zc(x + p) by basic_kernels.cu's add_rms_norm_zc_kernel mapping (one block of 256
// threads per row, thread i: elements i, i + 256, ...), on the same row_norm.cuh arithmetic.
// With p2 and x_out: v = (x + p) + p2, x_out = v (add_rms_norm_zc_kernel with two addends).
template <int kPer>
void reference_norm_kernel(const float* x, const float* p, const float* p2, float* x_out, const float* w, int n,
                           float eps, float* h) {
    const int64_t row = int64_t(blockIdx.x) * n;
    float v[kPer], wv[kPer];
    float ss = 0.0f;
    for (int k = 0; k < kPer; ++k) {
        const int64_t i = threadIdx.x + int64_t(k) * blockDim.x;
        v[k] = x[row + i];
        if (p != nullptr) v[k] = v[k] + p[row + i];
        if (p2 != nullptr) v[k] = v[k] + p2[row + i];
        wv[k] = w[i];
        ss += v[k] * v[k];
    }
    const float inv = qs::cuda::rms_inv(qs::cuda::block_sum(ss), n, eps);
    for (int k = 0; k < kPer; ++k) {
        const int64_t i = row + threadIdx.x + int64_t(k) * blockDim.x;
        if (x_out != nullptr) x_out[i] = v[k];
        h[i] = qs::cuda::norm_zc(v[k], inv, wv[k]);
    }
}

inline void reference_norm(const float* x, const float* p, const float* p2, float* x_out, const float* w, int64_t T,
                    int64_t n, float eps, float* h) {
    auto* k8 = reference_norm_kernel<8>;
    auto* k16 = reference_norm_kernel<16>;
    qs::cuda::ptx::launch_kernel(n == 2048 ? k8 : k16, dim3(unsigned(T)), dim3(256), 0, nullptr, x, p, p2, x_out, w,
                                 int(n), eps, h);
}

}  // namespace emu_norm

// Small-T fp32 linears (see small_linear_kernels.h, "fp32 weights").
//
// Grid: Σ out_p blocks of 8 warps; block g computes output feature g of the concatenated parts
// (part p = the first p with g < first_row[p + 1]) for all T rows, its 8 warps splitting `in`
// into 8 slices (the router's 257 rows then fill the GPU instead of 33 SMs). Lane l of warp s
// reads 16 bytes (4 fp32) of W's row at chunks l, l + 32, ... of slice s, all in flight, and for
// each row t the same 4 columns of x (L1/L2), fp32 FMAs in column order within a chunk; a
// butterfly gives the warp's slice sum, and thread t adds the 8 slice sums in slice order and
// writes y_p[t, o]. A row's sum does not depend on T or on the other parts of the launch (its own
// accumulators, the same order).
#include "backend/cuda/small_linear_kernels.h"

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/f32_linear_args.h"
#include "backend/cuda/f32_slice_dot.cuh"
#include "backend/cuda/ptx_helpers.cuh"
#include "core/check.h"

namespace qs::cuda {
namespace {

constexpr int kWarps = 8;   // = K slices per output feature
constexpr int kLoads = 4;   // 16-byte weight loads in flight per lane (in = 2,048: the whole slice)

template <int NMAX>
__global__ __launch_bounds__(kWarps * 32) void small_linear_f32_kernel(F32LinearArgs a) {
    __shared__ float partial[kWarps][NMAX];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int g = blockIdx.x;
    int p = 0;
    while (p + 1 < a.parts && g >= a.first_row[p + 1]) ++p;
    const int o = g - a.first_row[p], out = a.first_row[p + 1] - a.first_row[p];
    const int n4 = a.in / 4, T = a.T;
    const int c_begin = int(int64_t(n4) * warp / kWarps), c_end = int(int64_t(n4) * (warp + 1) / kWarps);
    const float4* w = reinterpret_cast<const float4*>(a.w[p] + size_t(o) * a.in);
    const float4* x = reinterpret_cast<const float4*>(a.x);
    float acc[NMAX];
    f32_slice_dot<NMAX, kLoads>(w, x, n4, T, c_begin, c_end, lane, [](const float4* q) { return __ldg(q); }, acc);
    if (lane == 0) {
#pragma unroll
        for (int n = 0; n < NMAX; ++n) partial[warp][n] = acc[n];
    }
    __syncthreads();
    const int t = threadIdx.x;
    if (t < T) {
        float y = 0.0f;
#pragma unroll
        for (int s = 0; s < kWarps; ++s) y += partial[s][t];
        a.y[p][size_t(t) * out + o] = y;
    }
}

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

}  // namespace

bool small_linear_f32_supports(int64_t T, int64_t in, const void* w, const float* x) {
    return T >= 1 && T <= kSmallLinearF32MaxRows && in > 0 && in % 128 == 0 && in <= (int64_t(1) << 24) &&
           aligned16(w) && aligned16(x);
}

void launch_small_linear_f32(std::span<const SmallLinearF32Part> parts, int64_t in, const float* x, int64_t T,
                             cudaStream_t stream) {
    const F32LinearArgs a =
        make_f32_linear_args(parts, in, x, T, small_linear_f32_supports, int64_t(1) << 30, "launch_small_linear_f32");
    const int64_t rows = a.first_row[a.parts];
    const dim3 grid{unsigned(rows)}, block{kWarps * 32};
    if (T == 1) ptx::launch_kernel(small_linear_f32_kernel<1>, grid, block, 0, stream, a);
    else if (T == 2) ptx::launch_kernel(small_linear_f32_kernel<2>, grid, block, 0, stream, a);
    else if (T <= 4) ptx::launch_kernel(small_linear_f32_kernel<4>, grid, block, 0, stream, a);
    else ptx::launch_kernel(small_linear_f32_kernel<8>, grid, block, 0, stream, a);
    QS_CUDA_CHECK_LAUNCH();
}

}  // namespace qs::cuda

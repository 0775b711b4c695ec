// One warp's share of fp32 row dot products, for the small-rows kernels that split a weight row
// over the warps of a block (small_linear_f32.cu; the MoE small-T router, moe_small_route.cu):
// chunks [c_begin, c_end) (16 bytes = 4 fp32 each) of the weight row w against the same chunks of
// T <= NMAX rows of x ([T, n4] chunks), LOADS weight chunks per lane in flight, fp32 FMAs in column
// order within a chunk, then a butterfly: every lane returns every row's slice sum in acc.
// `load` reads one 16-byte value (__ldg on the GPU). Also compiles as host C++ for the MoE
// emulation (bench/kernels/moe_emu.cpp).
#pragma once

namespace qs::cuda {

template <int NMAX, int LOADS, class Load>
__device__ __forceinline__ void f32_slice_dot(const float4* w, const float4* x, int n4, int T, int c_begin, int c_end,
                                              int lane, Load load, float (&acc)[NMAX]) {
#pragma unroll
    for (int n = 0; n < NMAX; ++n) acc[n] = 0.0f;
    for (int c0 = c_begin; c0 < c_end; c0 += 32 * LOADS) {
        float4 wv[LOADS];
#pragma unroll
        for (int u = 0; u < LOADS; ++u) {
            const int c = c0 + 32 * u + lane;
            wv[u] = c < c_end ? load(w + c) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        }
#pragma unroll
        for (int u = 0; u < LOADS; ++u) {
            const int c = c0 + 32 * u + lane;
            if (c >= c_end) continue;
#pragma unroll
            for (int n = 0; n < NMAX; ++n) {
                if (n >= T) continue;
                const float4 xv = load(x + size_t(n) * n4 + c);
                float s = acc[n];
                s = fmaf(wv[u].x, xv.x, s);
                s = fmaf(wv[u].y, xv.y, s);
                s = fmaf(wv[u].z, xv.z, s);
                s = fmaf(wv[u].w, xv.w, s);
                acc[n] = s;
            }
        }
    }
#pragma unroll
    for (int n = 0; n < NMAX; ++n)
#pragma unroll
        for (int s = 16; s > 0; s >>= 1) acc[n] += __shfl_xor_sync(0xffffffffu, acc[n], s);
}

}  // namespace qs::cuda

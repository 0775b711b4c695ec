// 16-bit tensor-core helpers of the Gated DeltaNet prefill versions 2-4 (gdn_tc_*.cu; NOTES.md "v5",
// "v5 accuracy", "v4: fp16 operands"): the operand formats (TcBf16, TcBf16x2, TcF16: packing and
// the matching mma.sync), fragment loaders from row-major 16-bit tiles in shared memory, and a
// warp-level product on mma.sync m16n8k16 (16-bit operands, fp32 accumulators, ptx_helpers.cuh).
// m16n8k16 fragments (g = lane/4, t = lane%4; a register holds two bf16, lower k / column low):
// A a0 (g, 2t..2t+1) a1 (g+8, 2t..) a2 (g, 2t+8..) a3 (g+8, 2t+8..); B b0 (k = 2t..2t+1, n = g)
// b1 (k = 2t+8.., n = g); C c0 (g,2t) c1 (g,2t+1) c2 (g+8,2t) c3 (g+8,2t+1).
// Tiles are uint16_t arrays of bf16 or fp16 bits (the host emulation has no 16-bit arithmetic type).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/ptx_helpers.cuh"

namespace qs::cuda::gdn {

__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
    const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<const uint32_t*>(&v);
}
__device__ __forceinline__ uint16_t to_bf16(float x) { return uint16_t(pack_bf16(x, 0.f) & 0xffffu); }
__device__ __forceinline__ float from_bf16(uint16_t h) { return __uint_as_float(uint32_t(h) << 16); }
__device__ __forceinline__ uint32_t pack_f16(float lo, float hi) {
    const __half2 v = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<const uint32_t*>(&v);
}
__device__ __forceinline__ float from_f16(uint16_t h) { return __half2float(__ushort_as_half(h)); }

// Operand formats, the kernels' template parameter Op: how a float becomes a 16-bit operand and
// which mma.sync multiplies two of them. bf16 (version 2), bf16 hi + lo pairs (version 3, x2: the
// kernels keep a lo twin of every tile, split_bf16 / pack_split), fp16 (version 4: 11-bit
// significand, 8x finer than bf16, range 6e-5 (normal) to 65,504; NOTES.md "v4: fp16 operands" for
// why every operand stays in that range). The fp32 state storage option (BF16) is independent.
struct TcBf16 {
    static constexpr bool x2 = false;
    static __device__ __forceinline__ uint32_t pack(float lo, float hi) { return pack_bf16(lo, hi); }
    static __device__ __forceinline__ uint16_t to(float x) { return to_bf16(x); }
    static __device__ __forceinline__ float from(uint16_t h) { return from_bf16(h); }
    static __device__ __forceinline__ void mma(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
        ptx::mma_16816_bf16(c, a, b0, b1);
    }
};
struct TcBf16x2 : TcBf16 {
    static constexpr bool x2 = true;
};
struct TcF16 {
    static constexpr bool x2 = false;
    static __device__ __forceinline__ uint32_t pack(float lo, float hi) { return pack_f16(lo, hi); }
    static __device__ __forceinline__ uint16_t to(float x) { return uint16_t(pack_f16(x, 0.f) & 0xffffu); }
    static __device__ __forceinline__ float from(uint16_t h) { return from_f16(h); }
    static __device__ __forceinline__ void mma(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
        ptx::mma_16816_f16(c, a, b0, b1);
    }
};

__device__ __forceinline__ uint32_t ld_u32(const uint16_t* p) { return *reinterpret_cast<const uint32_t*>(p); }
__device__ __forceinline__ uint32_t pair_u32(uint16_t lo, uint16_t hi) { return uint32_t(lo) | (uint32_t(hi) << 16); }

// A(i, k) = X[(m0 + i) * ld + k] (ld even): adjacent k are adjacent in memory.
__device__ __forceinline__ void tc_a_rows(const uint16_t* X, int ld, int m0, int k, uint32_t (&a)[4]) {
    const int g = (threadIdx.x & 31) >> 2, t2 = 2 * (threadIdx.x & 3);
    const uint16_t* r0 = X + (m0 + g) * ld + k + t2;
    const uint16_t* r1 = r0 + 8 * ld;
    a[0] = ld_u32(r0);
    a[1] = ld_u32(r1);
    a[2] = ld_u32(r0 + 8);
    a[3] = ld_u32(r1 + 8);
}

// A = Xᵀ: A(i, k) = X[k * ld + m0 + i].
__device__ __forceinline__ void tc_a_cols(const uint16_t* X, int ld, int m0, int k, uint32_t (&a)[4]) {
    const int g = (threadIdx.x & 31) >> 2, t2 = 2 * (threadIdx.x & 3);
    const uint16_t* c = X + (k + t2) * ld + m0 + g;
    a[0] = pair_u32(c[0], c[ld]);
    a[1] = pair_u32(c[8], c[ld + 8]);
    a[2] = pair_u32(c[8 * ld], c[9 * ld]);
    a[3] = pair_u32(c[8 * ld + 8], c[9 * ld + 8]);
}

// B = Xᵀ from rows n0..: B(k, n) = X[(n0 + n) * ld + k], tile j (n = 8j + g).
__device__ __forceinline__ void tc_b_cols(const uint16_t* X, int ld, int n0, int k, int j, uint32_t (&b)[2]) {
    const int g = (threadIdx.x & 31) >> 2, t2 = 2 * (threadIdx.x & 3);
    const uint16_t* r = X + (n0 + 8 * j + g) * ld + k + t2;
    b[0] = ld_u32(r);
    b[1] = ld_u32(r + 8);
}

// A tile written one column of 32 rows at a time with 16-bit stores (element (n, k) at n * ld + k,
// ld = 72: rows n, n+8, n+16, n+24 share a bank, a 4-way conflict) and read as B = Xᵀ (tc_b_cols)
// can swizzle its 32-bit words by row: element (n, k) at n * ld + tc_swz(n, k), word k/2 XOR
// ((n >> 3) & 3). The column stores of 32 consecutive rows then hit 32 banks, and the reads stay
// conflict-free: the 8 rows of one B fragment (n0 + 8j + g, n0 % 8 == 0) share the XOR, which
// permutes t within each group of 4 words (k % 16 == 0). Words stay inside the row (k < 64).
__device__ __forceinline__ int tc_swz(int n, int k) { return (((k >> 1) ^ ((n >> 3) & 3)) << 1) | (k & 1); }
__device__ __forceinline__ void tc_b_cols_swz(const uint16_t* X, int ld, int n0, int k, int j, uint32_t (&b)[2]) {
    const int g = (threadIdx.x & 31) >> 2, t2 = 2 * (threadIdx.x & 3);
    const int n = n0 + 8 * j + g;
    const uint16_t* r = X + n * ld;
    b[0] = ld_u32(r + tc_swz(n, k + t2));
    b[1] = ld_u32(r + tc_swz(n, k + t2 + 8));
}

// B from columns n0..: B(k, n) = X[k * ld + n0 + n], tile j.
__device__ __forceinline__ void tc_b_rows(const uint16_t* X, int ld, int n0, int k, int j, uint32_t (&b)[2]) {
    const int g = (threadIdx.x & 31) >> 2, t2 = 2 * (threadIdx.x & 3);
    const uint16_t* c = X + (k + t2) * ld + n0 + 8 * j + g;
    b[0] = pair_u32(c[0], c[ld]);
    b[1] = pair_u32(c[8 * ld], c[9 * ld]);
}

// Version 3's split operands (NOTES.md "v5 accuracy"): x = hi + lo, both bf16 (16 significant
// bits; the lo part's own rounding is ~2^-17 of x). pack_split does two adjacent values.
__device__ __forceinline__ void pack_split(float x0, float x1, uint32_t& hi, uint32_t& lo) {
    hi = pack_bf16(x0, x1);
    lo = pack_bf16(x0 - from_bf16(uint16_t(hi & 0xffffu)), x1 - from_bf16(uint16_t(hi >> 16)));
}
__device__ __forceinline__ void split_bf16(float x, uint16_t& hi, uint16_t& lo) {
    hi = to_bf16(x);
    lo = to_bf16(x - from_bf16(hi));
}

// acc[j] (16 × 8 tile, columns 8j) += A · B over k in [k0, k1) (multiples of 16) in the operand
// format Op; fa(k, a[4], lo) and fb(k, j, b[2], lo) give the fragments (the loaders above): the hi
// parts (lo = false), and with Op::x2 the lo parts too: A·B ≈ Ah·Bh + Al·Bh + Ah·Bl (the Al·Bl term
// is ~2^-16 of the product: below the fp32 accumulation's own error at these sizes).
template <int NJ, class Op, typename FA, typename FB>
__device__ __forceinline__ void tc_mma_x(float (&acc)[NJ][4], int k0, int k1, FA&& fa, FB&& fb) {
#pragma unroll 2
    for (int k = k0; k < k1; k += 16) {
        uint32_t a[4];
        [[maybe_unused]] uint32_t al[4];
        fa(k, a, false);
        if constexpr (Op::x2) fa(k, al, true);
#pragma unroll
        for (int j = 0; j < NJ; ++j) {
            uint32_t b[2];
            if constexpr (Op::x2) {
                fb(k, j, b, true);
                Op::mma(acc[j], a, b[0], b[1]);
                fb(k, j, b, false);
                Op::mma(acc[j], al, b[0], b[1]);
            } else {
                fb(k, j, b, false);
            }
            Op::mma(acc[j], a, b[0], b[1]);
        }
    }
}

template <int NJ>
__device__ __forceinline__ void tc_zero(float (&acc)[NJ][4]) {
#pragma unroll
    for (int j = 0; j < NJ; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) acc[j][e] = 0.f;
}

// f(j, e, r, c) for each pair (acc[j][e], acc[j][e + 1]) of a warp's 16 × 8·NJ tile at (m0, n0).
template <int NJ, typename F>
__device__ __forceinline__ void tc_pairs(int m0, int n0, F&& f) {
    const int g = (threadIdx.x & 31) >> 2, t2 = 2 * (threadIdx.x & 3);
#pragma unroll
    for (int j = 0; j < NJ; ++j)
#pragma unroll
        for (int e = 0; e < 4; e += 2) f(j, e, m0 + g + 4 * e, n0 + 8 * j + t2);
}

// Copies `rows` rows of `cols` bf16 (multiple of 8) from global (row r at src + r * gstride, rows >=
// valid and columns >= vcols zero-filled: vcols a multiple of 8) into a shared tile of pitch ld
// (multiple of 8) by 16-byte cp.async, spread over nthreads threads.
__device__ __forceinline__ void tc_cp_tile(uint16_t* dst, int ld, const uint16_t* src, int64_t gstride, int rows,
                                           int cols, int valid, int vcols, int tid, int nthreads) {
    const int per = cols / 8;
    const uint32_t base = ptx::smem_u32(dst);
    for (int i = tid; i < rows * per; i += nthreads) {
        const int r = i / per, c = 8 * (i % per);
        const bool on = r < valid && c < vcols;
        ptx::cp_async16(base + uint32_t(2 * (r * ld + c)), on ? src + r * gstride + c : src, on ? 16 : 0);
    }
}

}  // namespace qs::cuda::gdn

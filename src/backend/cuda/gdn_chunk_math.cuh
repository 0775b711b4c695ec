// Tensor-core helpers of the chunked Gated DeltaNet kernels (gdn_chunked.cu, gdn_cp_prep.cu,
// gdn_cp_state.cu): tf32 conversion and mma.sync m16n8k8 tf32, the 3xTF32 split, a warp-level
// tile product over a k range, and the in-place inverse of a unit lower-triangular 64 × 64 matrix.
// mma.m16n8k8 tf32 fragments (g = lane/4, t = lane%4): A a0 (g,t) a1 (g+8,t) a2 (g,t+4) a3 (g+8,t+4);
// B b0 (k=t, n=g) b1 (k=t+4, n=g); C c0 (g,2t) c1 (g,2t+1) c2 (g+8,2t) c3 (g+8,2t+1).
// The host emulation (bench/kernels/emu/run_emu.sh) rewrites to_tf32 and mma_tf32 in this file.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace qs::cuda::gdn {

__device__ __forceinline__ uint32_t to_tf32(float x) {
    uint32_t r;
    asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(x));
    return r;
}

__device__ __forceinline__ void mma_tf32(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
    asm volatile(
        "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// X3: x = hi + lo with both halves tf32 (a·b ≈ a_hi·b_hi + a_hi·b_lo + a_lo·b_hi); else lo = 0.
template <bool X3, int N>
__device__ __forceinline__ void split_tf32(const float (&x)[N], uint32_t (&hi)[N], uint32_t (&lo)[N]) {
#pragma unroll
    for (int i = 0; i < N; ++i) {
        hi[i] = to_tf32(x[i]);
        lo[i] = X3 ? to_tf32(x[i] - __uint_as_float(hi[i])) : 0u;
    }
}

// One (split) product acc += a · b.
template <bool X3>
__device__ __forceinline__ void mma_split(float (&acc)[4], const uint32_t (&ah)[4], const uint32_t (&al)[4],
                                          const uint32_t (&bh)[2], const uint32_t (&bl)[2]) {
    if (X3) {
        mma_tf32(acc, al, bh);
        mma_tf32(acc, ah, bl);
    }
    mma_tf32(acc, ah, bh);
}

// acc[j] (16 × 8 tile at rows m0.., cols n0 + 8j) += A · B over k in [k0, k1) (multiples of 8).
// fa(k, a[4]) gives A(g, k+t), A(g+8, k+t), A(g, k+t+4), A(g+8, k+t+4) (rows relative to m0);
// fb(k, j, b[2]) gives B(k+t, 8j+g), B(k+t+4, 8j+g) (columns relative to n0).
template <bool X3, int NJ, typename FA, typename FB>
__device__ __forceinline__ void warp_mma(float (&acc)[NJ][4], int k0, int k1, FA&& fa, FB&& fb) {
#pragma unroll 2
    for (int k = k0; k < k1; k += 8) {
        float a[4];
        fa(k, a);
        uint32_t ah[4], al[4];
        split_tf32<X3>(a, ah, al);
#pragma unroll
        for (int j = 0; j < NJ; ++j) {
            float b[2];
            fb(k, j, b);
            uint32_t bh[2], bl[2];
            split_tf32<X3>(b, bh, bl);
            mma_split<X3>(acc[j], ah, al, bh, bl);
        }
    }
}

// In place: sT (64 × 64, row pitch ldt, holding L strictly below the diagonal, zeros elsewhere) becomes
// T = (I + L)^-1 (lower triangular, unit diagonal, zeros above). Diagonal 16 × 16 blocks by forward
// substitution (one thread per column), then T_ij = -T_ii Σ_{m=j}^{i-1} L_im T_mj block row by
// block row. scratch: 768 floats. Needs >= 256 threads (threads >= 256 idle, barriers included);
// every thread of the block must call it; starts and ends with the caller's data synchronised.
__device__ __forceinline__ void invert_unit_lower64(float* sT, int ldt, float* scratch) {
    const int tid = threadIdx.x;
    const bool on = tid < 256;
    const int bi = tid >> 4, cc = tid & 15;
    {
        float tcol[16];
        if (tid < 64) {
            const float* Lb = sT + (16 * bi) * ldt + 16 * bi;
#pragma unroll
            for (int r = 0; r < 16; ++r) {
                float v = (r == cc) ? 1.f : 0.f;
#pragma unroll
                for (int s2 = 0; s2 < r; ++s2) v = fmaf(-Lb[r * ldt + s2], tcol[s2], v);
                tcol[r] = v;
            }
        }
        __syncthreads();
        if (tid < 64) {
            float* Tb = sT + (16 * bi) * ldt + 16 * bi;
#pragma unroll
            for (int r = 0; r < 16; ++r) Tb[r * ldt + cc] = tcol[r];
        }
        __syncthreads();
    }
    const int rr = tid >> 4;
#pragma unroll 1
    for (int bi2 = 1; bi2 < 4; ++bi2) {
        if (on)
            for (int j = 0; j < bi2; ++j) {  // X_ij = Σ_{m=j}^{i-1} L_im T_mj
                float x = 0.f;
                for (int m = j; m < bi2; ++m) {
                    const float* Lr = sT + (16 * bi2 + rr) * ldt + 16 * m;
                    const float* Tc = sT + (16 * m) * ldt + 16 * j + cc;
#pragma unroll
                    for (int q = 0; q < 16; ++q) x = fmaf(Lr[q], Tc[q * ldt], x);
                }
                scratch[j * 256 + tid] = x;
            }
        __syncthreads();
        if (on)
            for (int j = 0; j < bi2; ++j) {  // T_ij = -T_ii X_ij
                const float* Ti = sT + (16 * bi2 + rr) * ldt + 16 * bi2;
                float x = 0.f;
#pragma unroll
                for (int q = 0; q < 16; ++q) x = fmaf(Ti[q], scratch[j * 256 + q * 16 + cc], x);
                sT[(16 * bi2 + rr) * ldt + 16 * j + cc] = -x;
            }
        __syncthreads();
    }
}

}  // namespace qs::cuda::gdn

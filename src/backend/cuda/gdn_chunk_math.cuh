// Tensor-core helpers of the chunked Gated DeltaNet kernels (gdn_chunked.cu, gdn_cp_prep.cu,
// gdn_cp_state.cu): tf32 conversion and mma.sync m16n8k8 tf32, the 3xTF32 split, a warp-level
// tile product over a k range with its fragment loaders, the in-place inverse of a unit
// lower-triangular 64 × 64 matrix, and the per-chunk phases both chunked paths share (L, the WY
// products W and U, V' = U - W S, O = Q̃ S + P V', the state update), each on one warp's tiles.
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

// Fragment loaders for warp_mma's fa / fb (g, t as above; k is warp_mma's step). A from rows m0..
// of X: A(i, k) = X[(m0 + i) * ld + k].
__device__ __forceinline__ void frag_a_rows(const float* X, int ld, int m0, int k, float (&a)[4]) {
    const int g = (threadIdx.x & 31) >> 2, t4 = threadIdx.x & 3;
    a[0] = X[(m0 + g) * ld + k + t4];
    a[1] = X[(m0 + g + 8) * ld + k + t4];
    a[2] = X[(m0 + g) * ld + k + t4 + 4];
    a[3] = X[(m0 + g + 8) * ld + k + t4 + 4];
}

// A = Xᵀ from columns m0.. of X: A(i, k) = X[k * ld + m0 + i].
__device__ __forceinline__ void frag_a_cols(const float* X, int ld, int m0, int k, float (&a)[4]) {
    const int g = (threadIdx.x & 31) >> 2, t4 = threadIdx.x & 3;
    a[0] = X[(k + t4) * ld + m0 + g];
    a[1] = X[(k + t4) * ld + m0 + g + 8];
    a[2] = X[(k + t4 + 4) * ld + m0 + g];
    a[3] = X[(k + t4 + 4) * ld + m0 + g + 8];
}

// B from columns n0.. of X: B(k, n) = X[k * ld + n0 + n], tile j (n = 8j + g).
__device__ __forceinline__ void frag_b_rows(const float* X, int ld, int n0, int k, int j, float (&b)[2]) {
    const int g = (threadIdx.x & 31) >> 2, t4 = threadIdx.x & 3;
    b[0] = X[(k + t4) * ld + n0 + 8 * j + g];
    b[1] = X[(k + t4 + 4) * ld + n0 + 8 * j + g];
}

// B = Xᵀ from rows n0.. of X: B(k, n) = X[(n0 + n) * ld + k], tile j (n = 8j + g).
__device__ __forceinline__ void frag_b_cols(const float* X, int ld, int n0, int k, int j, float (&b)[2]) {
    const int g = (threadIdx.x & 31) >> 2, t4 = threadIdx.x & 3;
    b[0] = X[(n0 + 8 * j + g) * ld + k + t4];
    b[1] = X[(n0 + 8 * j + g) * ld + k + t4 + 4];
}

// f(j, e, r, c) for each pair (acc[j][e], acc[j][e + 1]) of the warp's accumulator tiles (16 × 8·NJ
// at rows m0, columns n0; e = 0, 2): the pair's row r and first column c.
template <int NJ, typename F>
__device__ __forceinline__ void for_each_pair(int m0, int n0, F&& f) {
    const int g = (threadIdx.x & 31) >> 2, t4 = threadIdx.x & 3;
#pragma unroll
    for (int j = 0; j < NJ; ++j)
#pragma unroll
        for (int e = 0; e < 4; e += 2) f(j, e, m0 + g + 8 * (e >> 1), n0 + 8 * j + 2 * t4);
}

// The warp's accumulator tiles from X / to X (pitch ld), as float2 pairs.
template <int NJ>
__device__ __forceinline__ void load_tiles(float (&acc)[NJ][4], const float* X, int ld, int m0, int n0) {
    for_each_pair<NJ>(m0, n0, [&](int j, int e, int r, int c) {
        const float2 x = *reinterpret_cast<const float2*>(X + r * ld + c);
        acc[j][e] = x.x;
        acc[j][e + 1] = x.y;
    });
}

template <int NJ>
__device__ __forceinline__ void store_tiles(float* X, int ld, int m0, int n0, const float (&acc)[NJ][4]) {
    for_each_pair<NJ>(m0, n0, [&](int j, int e, int r, int c) {
        *reinterpret_cast<float2*>(X + r * ld + c) = make_float2(acc[j][e], acc[j][e + 1]);
    });
}

// acc = the warp's 16 × 32 tile (rows m0, columns n0) of X Kᵀ over k in [0, kdim): the
// lower-triangle products (L, P) of a chunk. Tiles entirely above the diagonal stay zero.
template <bool X3>
__device__ __forceinline__ void gram_lower(float (&acc)[4][4], const float* X, int ldx, const float* K, int ldk,
                                           int m0, int n0, int kdim) {
#pragma unroll
    for (int j = 0; j < 4; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) acc[j][e] = 0.f;
    if (n0 <= m0 + 15)
        warp_mma<X3, 4>(
            acc, 0, kdim, [&](int k, float (&a)[4]) { frag_a_rows(X, ldx, m0, k, a); },
            [&](int k, int j, float (&b)[2]) { frag_b_cols(K, ldk, n0, k, j, b); });
}

// L = strict_lower(β_r k̂_r·k̂_s e^{γr-γs}) into sT (pitch ldt) from K̂ (sK, Dk = kdim columns),
// β and γ: the warp's 16 × 32 tile at (m0, n0), every entry written (zeros on and above the
// diagonal).
template <bool X3>
__device__ __forceinline__ void chunk_lower_l(float* sT, int ldt, const float* sK, int ldk, const float* beta,
                                              const float* gam, int m0, int n0, int kdim) {
    const int g = (threadIdx.x & 31) >> 2, t4 = threadIdx.x & 3;
    float acc[4][4];
    gram_lower<X3>(acc, sK, ldk, sK, ldk, m0, n0, kdim);
#pragma unroll
    for (int j = 0; j < 4; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            const int r = m0 + g + 8 * (e >> 1), c = n0 + 8 * j + 2 * t4 + (e & 1);
            sT[r * ldt + c] = c < r ? beta[r] * acc[j][e] * expf(gam[r] - gam[c]) : 0.f;
        }
}

// The WY products on the warp's tiles (rows m0, columns n0): aw = T (K̂ diag(fk)) and
// au = T (V diag(β)), with T = (I + L)^-1 lower triangular (k < m0 + 16) and fk = β e^γ.
template <bool X3, int NJ>
__device__ __forceinline__ void chunk_wy(float (&aw)[NJ][4], float (&au)[NJ][4], const float* sT, int ldt,
                                         const float* sK, int ldk, const float* sV, int ldv, const float* fk,
                                         const float* beta, int m0, int n0) {
    const int g = (threadIdx.x & 31) >> 2, t4 = threadIdx.x & 3;
#pragma unroll
    for (int j = 0; j < NJ; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) aw[j][e] = au[j][e] = 0.f;
    const int kend = m0 + 16;
#pragma unroll 1
    for (int k = 0; k < kend; k += 8) {
        float a[4];
        frag_a_rows(sT, ldt, m0, k, a);
        uint32_t ah[4], al[4];
        split_tf32<X3>(a, ah, al);
        const float f0 = fk[k + t4], f1 = fk[k + t4 + 4];
        const float b0s = beta[k + t4], b1s = beta[k + t4 + 4];
#pragma unroll
        for (int j = 0; j < NJ; ++j) {
            const int cn = n0 + 8 * j + g;
            float b[2], bu[2];
            b[0] = sK[(k + t4) * ldk + cn] * f0;
            b[1] = sK[(k + t4 + 4) * ldk + cn] * f1;
            bu[0] = sV[(k + t4) * ldv + cn] * b0s;
            bu[1] = sV[(k + t4 + 4) * ldv + cn] * b1s;
            uint32_t bh[2], bl[2], uh[2], ul[2];
            split_tf32<X3>(b, bh, bl);
            split_tf32<X3>(bu, uh, ul);
            mma_split<X3>(aw[j], ah, al, bh, bl);
            mma_split<X3>(au[j], ah, al, uh, ul);
        }
    }
}

// V' = U - W S in place in sV (pitch ldv) on the warp's tiles (rows m0, columns n0), k over the
// kdim rows of S. Each thread rewrites only its own fragment: no barrier needed inside.
template <bool X3, int NJ>
__device__ __forceinline__ void chunk_v_prime(float* sV, int ldv, const float* sW, int ldw, const float* sS, int lds,
                                              int m0, int n0, int kdim) {
    float acc[NJ][4];
    load_tiles<NJ>(acc, sV, ldv, m0, n0);
    warp_mma<X3, NJ>(
        acc, 0, kdim,
        [&](int k, float (&a)[4]) {
            frag_a_rows(sW, ldw, m0, k, a);
#pragma unroll
            for (int i = 0; i < 4; ++i) a[i] = -a[i];
        },
        [&](int k, int j, float (&b)[2]) { frag_b_rows(sS, lds, n0, k, j, b); });
    store_tiles<NJ>(sV, ldv, m0, n0, acc);
}

// acc = Q̃ S + P V' on the warp's tiles (rows m0, columns n0): fq(k, a) loads Q̃'s A fragment
// (rows m0..; k over the kdim rows of S); P (pitch ldp) is lower triangular (k < m0 + 16).
template <bool X3, int NJ, typename FQ>
__device__ __forceinline__ void chunk_output(float (&acc)[NJ][4], FQ&& fq, const float* sS, int lds, const float* sP,
                                             int ldp, const float* sV, int ldv, int m0, int n0, int kdim) {
#pragma unroll
    for (int j = 0; j < NJ; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) acc[j][e] = 0.f;
    warp_mma<X3, NJ>(acc, 0, kdim, fq, [&](int k, int j, float (&b)[2]) { frag_b_rows(sS, lds, n0, k, j, b); });
    warp_mma<X3, NJ>(
        acc, 0, m0 + 16, [&](int k, float (&a)[4]) { frag_a_rows(sP, ldp, m0, k, a); },
        [&](int k, int j, float (&b)[2]) { frag_b_rows(sV, ldv, n0, k, j, b); });
}

// acc = e^{γlast} S + K̃ᵀ V' on the warp's tiles of S (rows ms0, columns n0), k over the chunk's
// kc rows: fk(k, a) loads K̃ᵀ's A fragment (columns ms0.. of K̃). The caller stores acc back into
// S (store_tiles) after a barrier: every warp reads all of S first.
template <bool X3, int NJ, typename FK>
__device__ __forceinline__ void chunk_state_update(float (&acc)[NJ][4], float el, FK&& fk, const float* sS, int lds,
                                                   const float* sV, int ldv, int ms0, int n0, int kc) {
    load_tiles<NJ>(acc, sS, lds, ms0, n0);
#pragma unroll
    for (int j = 0; j < NJ; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) acc[j][e] = el * acc[j][e];
    warp_mma<X3, NJ>(acc, 0, kc, fk, [&](int k, int j, float (&b)[2]) { frag_b_rows(sV, ldv, n0, k, j, b); });
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

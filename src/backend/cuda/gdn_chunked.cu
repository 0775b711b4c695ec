// Gated DeltaNet, step 2b: the chunked WY recurrence on tensor cores for sequences of at least
// chunk_min_tokens rows, launched by launch_gdn_recurrence (gdn_kernels.cu). CPU reference:
// src/backend/cpu/cpu_gdn.cpp.
#include "backend/cuda/device_limits.h"
#include "backend/cuda/gdn_chunk_math.cuh"
#include "backend/cuda/gdn_common.cuh"

namespace qs::cuda::gdn {
namespace {

// ---------------------------------------------------------------------------------------------
// Kernel 2b: chunked recurrence (WY / UT form, chunk 64) on tensor cores (mma.sync m16n8k8 tf32;
// X3 = the 3xTF32 split a·b ≈ a_hi·b_hi + a_hi·b_lo + a_lo·b_hi, fp32-level accuracy).
// Grid (Nv, chunked_seq_blocks), 256 threads (8 warps), one block per (sequence, value head) with
// n >= chunk_min_tokens; the state S [Dk, Dv] stays in shared memory (fp32) for the whole call.
// Per chunk of nc <= 64 tokens (rows >= nc are zero: q = k = v = β = g = 0), with γ = cumsum(g):
//   L = strict_lower(β_r k̂_r·k̂_s e^{γr-γs});  T = (I + L)^-1   (16×16 diagonal blocks by forward
//       substitution, off-diagonal blocks T_ij = -T_ii Σ_m L_im T_mj)
//   W = T (k̂ β e^γ), U = T (v β);  P = lower(q̂_r·k̂_s e^{γr-γs}) (diagonal included)
//   V' = U - W S;  O = (q̂ e^γ) S + P V';  S ← e^{γ_last} S + (k̂ e^{γ_last-γ})ᵀ V'
//   out = gated RMSNorm(O) as in the serial kernel.
// Shared memory (floats; row pitches padded by 4 or 8 against bank conflicts): S [D][D+8],
// Q̂ [64][D+4], K̂ [64][D+8], V/U/V' [64][D+8], W/X-scratch/O [64][D+4], L/T/P [64][68], 5×64 vectors.
// D = 128: 225,536 bytes (1 block per SM).
// mma helpers, the (I + L)^-1 step and the phases shared with the chunk-parallel kernels (L1, L3,
// the products of L4, L5, L6): gdn_chunk_math.cuh.
// ---------------------------------------------------------------------------------------------
constexpr int kChunk = 64;
constexpr int kChunkThreads = 256;

template <int D>
struct ChunkSmem {
    static constexpr int CT = kChunk;
    static constexpr int LDQ = D + 4, LDK = D + 8, LDV = D + 8, LDW = D + 4, LDS = D + 8, LDT = CT + 4;
    static constexpr int oS = 0;
    static constexpr int oQ = oS + D * LDS;
    static constexpr int oK = oQ + CT * LDQ;
    static constexpr int oV = oK + CT * LDK;
    static constexpr int oW = oV + CT * LDV;
    static constexpr int oT = oW + CT * LDW;
    static constexpr int oVec = oT + CT * LDT;  // beta, gam, eg, egl, fk: CT each, then misc[4]
    static constexpr int floats = oVec + 5 * CT + 4;
    static constexpr size_t bytes = size_t(floats) * sizeof(float);
};

template <int D, bool BF16, bool X3>
__global__ void __launch_bounds__(kChunkThreads, 1) gdn_chunked_kernel(RecArgs p) {
    using L = ChunkSmem<D>;
    constexpr int CT = kChunk;
    constexpr int LDQ = L::LDQ, LDK = L::LDK, LDV = L::LDV, LDW = L::LDW, LDS = L::LDS, LDT = L::LDT;
    constexpr int NT = kChunkThreads;
    constexpr int D4 = D / 4;
    static_assert(D % 32 == 0 && D <= 128, "D");

    const DeviceSeq sq = p.seqs[chunked_seq_of(p, blockIdx.y)];
    const int n = sq.num_tokens;
    if (p.chunk_min_tokens <= 0 || n < p.chunk_min_tokens || n <= 0) return;

    extern __shared__ float4 smem4[];
    float* const sm = reinterpret_cast<float*>(smem4);
    float* const sS = sm + L::oS;
    float* const sQ = sm + L::oQ;
    float* const sK = sm + L::oK;
    float* const sV = sm + L::oV;
    float* const sW = sm + L::oW;
    float* const sT = sm + L::oT;
    float* const sBeta = sm + L::oVec;
    float* const sGam = sBeta + CT;
    float* const sEg = sGam + CT;
    float* const sEgl = sEg + CT;
    float* const sFk = sEgl + CT;
    float* const sMisc = sFk + CT;

    const int h = blockIdx.x;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int g = lane >> 2, t4 = lane & 3;
    const int dk = p.Dk, dv = p.Dv, Nv = p.Nv;
    const int kh = h / (Nv / p.Nk);
    const int64_t C = p.C, ZW = int64_t(Nv) * dv;
    const float A = expf(p.A_log[h]);
    const float dtb = p.dt_bias[h];

    // State into shared memory, zero-padded to D × D.
    const int64_t sbase = (int64_t(sq.state_slot) * Nv + h) * dk * dv;
#pragma unroll 4
    for (int idx = tid; idx < D * D4; idx += NT) {
        const int r = idx / D4, c = 4 * (idx % D4);
        const float4 v = (r < dk && c < dv) ? StateIO<BF16>::load(p.state, sbase + int64_t(r) * dv + c)
                                            : make_float4(0.f, 0.f, 0.f, 0.f);
        *reinterpret_cast<float4*>(sS + r * LDS + c) = v;
    }

    // Warp tiling of the 64-row products: m-tile mi (16 rows), half of the columns.
    const int mi = warp >> 1, half = warp & 1;
    const int m0 = 16 * mi;
    // Warp tiling of the D × D state update.
    constexpr int WPM = 128 / D;             // warps per 16-row tile of S
    constexpr int NJS = (D / 8) / WPM;       // 8-column tiles per warp
    const int ms0 = 16 * (warp / WPM), ns0 = (warp % WPM) * NJS * 8;
    constexpr int NJD = D / 16;              // 8-column tiles per warp in 64 × D products
    const int nd0 = half * (D / 2);
    constexpr int NJC = 4;                   // 8-column tiles per warp in 64 × 64 products
    const int nc0 = half * 32;

    for (int t0 = 0; t0 < n; t0 += CT) {
        const int nc = min(CT, n - t0);
        const int64_t row0 = int64_t(sq.row_begin) + t0;

        // ---- L0a: raw q, k, v of the chunk (zero rows / columns beyond), gates.
#pragma unroll 4
        for (int idx = tid; idx < CT * D4; idx += NT) {
            const int r = idx / D4, c = 4 * (idx % D4);
            const float* src = p.conv + (row0 + r) * C;
            const bool rv = r < nc;
            const float4 z4 = make_float4(0.f, 0.f, 0.f, 0.f);
            const float4 q4 = (rv && c < dk) ? ld4(src + kh * dk + c) : z4;
            const float4 k4 = (rv && c < dk) ? ld4(src + p.Nk * dk + kh * dk + c) : z4;
            const float4 v4 = (rv && c < dv) ? ld4(src + 2 * p.Nk * dk + h * dv + c) : z4;
            *reinterpret_cast<float4*>(sQ + r * LDQ + c) = q4;
            *reinterpret_cast<float4*>(sK + r * LDK + c) = k4;
            *reinterpret_cast<float4*>(sV + r * LDV + c) = v4;
        }
        if (tid < CT) {
            float beta = 0.f, gg = 0.f;
            if (tid < nc) {
                const int64_t row = row0 + tid;
                beta = sigmoid_f(p.b[row * Nv + h]);
                gg = -A * softplus_f(p.a[row * Nv + h] + dtb);
            }
            sBeta[tid] = beta;
            sGam[tid] = gg;
        }
        __syncthreads();

        // ---- L0b: l2norm rows of q (× 1/sqrt(Dk)) and k; γ = cumsum(g) and its exponentials.
#pragma unroll 1
        for (int r = warp; r < CT; r += NT / 32) {
            float qv[D / 32], kv[D / 32], qs = 0.f, ks = 0.f;
#pragma unroll
            for (int j = 0; j < D / 32; ++j) {
                qv[j] = sQ[r * LDQ + lane + 32 * j];
                kv[j] = sK[r * LDK + lane + 32 * j];
                qs = fmaf(qv[j], qv[j], qs);
                ks = fmaf(kv[j], kv[j], ks);
            }
#pragma unroll
            for (int sh = 16; sh >= 1; sh >>= 1) {
                qs += __shfl_xor_sync(0xffffffffu, qs, sh);
                ks += __shfl_xor_sync(0xffffffffu, ks, sh);
            }
            const float rq = p.q_scale / sqrtf(qs + 1e-6f), rk = 1.0f / sqrtf(ks + 1e-6f);
#pragma unroll
            for (int j = 0; j < D / 32; ++j) {
                sQ[r * LDQ + lane + 32 * j] = qv[j] * rq;
                sK[r * LDK + lane + 32 * j] = kv[j] * rk;
            }
        }
        if (warp == 0) {
            const float g0 = sGam[2 * lane], g1 = sGam[2 * lane + 1];
            float inc = g0 + g1;
#pragma unroll
            for (int off = 1; off < 32; off <<= 1) {
                const float u = __shfl_up_sync(0xffffffffu, inc, off);
                if (lane >= off) inc += u;
            }
            const float last = __shfl_sync(0xffffffffu, inc, 31);
            const float ga = inc - g1, gb = inc;  // γ at rows 2·lane, 2·lane + 1
            sGam[2 * lane] = ga;
            sGam[2 * lane + 1] = gb;
            sEg[2 * lane] = expf(ga);
            sEg[2 * lane + 1] = expf(gb);
            sEgl[2 * lane] = expf(last - ga);
            sEgl[2 * lane + 1] = expf(last - gb);
            sFk[2 * lane] = sBeta[2 * lane] * expf(ga);
            sFk[2 * lane + 1] = sBeta[2 * lane + 1] * expf(gb);
            if (lane == 0) sMisc[0] = expf(last);
        }
        __syncthreads();

        // ---- L1: L = strict_lower(β_r k̂_r·k̂_s e^{γr-γs}) into sT (all 64 × 64 entries written).
        chunk_lower_l<X3>(sT, LDT, sK, LDK, sBeta, sGam, m0, nc0, D);
        __syncthreads();

        // ---- L2: T = (I + L)^-1 in place (16 × 16 blocks; sW is the scratch).
        invert_unit_lower64(sT, LDT, sW);

        // ---- L3: W = T (k̂ β e^γ) -> sW, U = T (v β) -> sV (in place, after a barrier).
        {
            float aw[NJD][4], au[NJD][4];
            chunk_wy<X3, NJD>(aw, au, sT, LDT, sK, LDK, sV, LDV, sFk, sBeta, m0, nd0);
            __syncthreads();  // every warp is done reading T, K̂, V
            store_tiles<NJD>(sW, LDW, m0, nd0, aw);
            store_tiles<NJD>(sV, LDV, m0, nd0, au);
        }

        // ---- L4: P = lower(q̂_r·k̂_s e^{γr-γs}) (diagonal included) into sT (T is no longer read).
        {
            float acc[NJC][4];
            gram_lower<X3>(acc, sQ, LDQ, sK, LDK, m0, nc0, D);
#pragma unroll
            for (int j = 0; j < NJC; ++j)
#pragma unroll
                for (int e = 0; e < 4; ++e) {
                    const int r = m0 + g + 8 * (e >> 1), c = nc0 + 8 * j + 2 * t4 + (e & 1);
                    sT[r * LDT + c] = c <= r ? acc[j][e] * expf(sGam[r] - sGam[c]) : 0.f;
                }
        }
        __syncthreads();

        // ---- L5: V' = U - W S, in place in sV (each thread rewrites only its own fragment).
        chunk_v_prime<X3, NJD>(sV, LDV, sW, LDW, sS, LDS, m0, nd0, D);
        __syncthreads();

        // ---- L6: O = (q̂ e^γ) S + P V' -> sW (W is dead); then S ← e^{γ_last} S + (k̂ e^{γ_last-γ})ᵀ V'.
        {
            float acc[NJD][4];
            const float e0 = sEg[m0 + g], e1 = sEg[m0 + g + 8];
            chunk_output<X3, NJD>(
                acc,
                [&](int k, float (&a)[4]) {  // Q̃ = q̂ e^γ
                    frag_a_rows(sQ, LDQ, m0, k, a);
                    a[0] *= e0;
                    a[1] *= e1;
                    a[2] *= e0;
                    a[3] *= e1;
                },
                sS, LDS, sT, LDT, sV, LDV, m0, nd0, D);
            store_tiles<NJD>(sW, LDW, m0, nd0, acc);
        }
        {
            float acc[NJS][4];
            chunk_state_update<X3, NJS>(
                acc, sMisc[0],
                [&](int k, float (&a)[4]) {  // A(d, s) = k̂[s][d] e^{γ_last - γ_s}
                    const float f0 = sEgl[k + t4], f1 = sEgl[k + t4 + 4];
                    frag_a_cols(sK, LDK, ms0, k, a);
                    a[0] *= f0;
                    a[1] *= f0;
                    a[2] *= f1;
                    a[3] *= f1;
                },
                sS, LDS, sV, LDV, ms0, ns0, CT);
            __syncthreads();  // every warp is done reading S (O and the update); O is in sW
            store_tiles<NJS>(sS, LDS, ms0, ns0, acc);
        }

        // ---- L7: gated RMSNorm of the chunk's rows (O in sW) -> out. The next chunk's loads touch
        // only sQ, sK, sV and the vectors, which nothing reads any more in this chunk. z of all the
        // warp's rows is loaded first (one memory round trip per chunk, not one per row).
        {
            constexpr int RPW = CT / (NT / 32);  // rows per warp
            float zr[RPW][D / 32];
#pragma unroll
            for (int i = 0; i < RPW; ++i) {
                const int r = warp + (NT / 32) * i;
#pragma unroll
                for (int j = 0; j < D / 32; ++j) {
                    const int e = lane + 32 * j;
                    zr[i][j] = (r < nc && e < dv) ? p.z[(row0 + r) * ZW + int64_t(h) * dv + e] : 0.f;
                }
            }
#pragma unroll
            for (int i = 0; i < RPW; ++i) {
                const int r = warp + (NT / 32) * i;
                if (r >= nc) break;
                float o[D / 32], ss = 0.f;
#pragma unroll
                for (int j = 0; j < D / 32; ++j) {
                    o[j] = sW[r * LDW + lane + 32 * j];  // columns >= dv are 0
                    ss = fmaf(o[j], o[j], ss);
                }
#pragma unroll
                for (int sh = 16; sh >= 1; sh >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, sh);
                const float inv = 1.0f / sqrtf(ss / float(dv) + p.eps);
                const int64_t orow = (row0 + r) * ZW + int64_t(h) * dv;
#pragma unroll
                for (int j = 0; j < D / 32; ++j) {
                    const int e = lane + 32 * j;
                    if (e < dv) p.out[orow + e] = p.norm_w[e] * (o[j] * inv) * silu_f(zr[i][j]);
                }
            }
        }
        // sW (O) is next written in the next chunk's L2, after two barriers.
    }
    __syncthreads();  // the last chunk's S update is visible
    for (int idx = tid; idx < D * D4; idx += NT) {
        const int r = idx / D4, c = 4 * (idx % D4);
        if (r < dk && c < dv)
            StateIO<BF16>::store(p.state, sbase + int64_t(r) * dv + c, *reinterpret_cast<const float4*>(sS + r * LDS + c));
    }
}

template <int D, bool BF16, bool X3>
void launch_chunked_t(const RecArgs& a, int num_seqs, cudaStream_t stream) {
    constexpr size_t smem = ChunkSmem<D>::bytes;
    if (num_seqs <= 0) return;
    allow_dynamic_smem<gdn_chunked_kernel<D, BF16, X3>>(smem);
    gdn_chunked_kernel<D, BF16, X3><<<dim3(a.Nv, num_seqs), kChunkThreads, smem, stream>>>(a);
    QS_CUDA_CHECK_LAUNCH();
}

}  // namespace

template <int D>
void launch_chunked(const RecArgs& a, bool bf16, bool x3, int num_seqs, cudaStream_t stream) {
    if (bf16) {
        if (x3) launch_chunked_t<D, true, true>(a, num_seqs, stream);
        else launch_chunked_t<D, true, false>(a, num_seqs, stream);
    } else {
        if (x3) launch_chunked_t<D, false, true>(a, num_seqs, stream);
        else launch_chunked_t<D, false, false>(a, num_seqs, stream);
    }
}

template void launch_chunked<32>(const RecArgs&, bool, bool, int, cudaStream_t);
template void launch_chunked<64>(const RecArgs&, bool, bool, int, cudaStream_t);
template void launch_chunked<128>(const RecArgs&, bool, bool, int, cudaStream_t);

}  // namespace qs::cuda::gdn

// Gated DeltaNet, chunk-parallel path, step 2 of 2: the pass over the chunks in order, split over
// value columns so that one long sequence still fills the GPU, then the gated RMSNorm of the rows.
// Inputs from gdn_cp_prep.cu (W, U, P, γ, norms; RecArgs in gdn_common.cuh). CPU reference:
// src/backend/cpu/cpu_gdn.cpp.
//
// gdn_cp_state_kernel<D, BV, BF16, X3>: grid (ceil(Dv/BV), Nv, chunked_seq_blocks), 256 threads; block = BV
// (32, or 64 at D = 128) value columns [v0, v0 + BV) of one (chunked sequence, value head); its
// state slice S [Dk, BV]
// stays in shared memory (fp32) for the whole call, read and written once. Per chunk (nc rows):
//   Q̃ = q̂ e^γ, K̃ = k̂ e^{γlast-γ} (rebuilt from the raw conv rows and the prep's norms);
//   V' = U - W S;  O = Q̃ S + P V' -> out (not normalised yet);  S ← e^{γlast} S + K̃ᵀ V'.
// Shared memory (floats): S [D][BV+8], W [64][D+4], Q̃ [64][D+4], K̃ [64][D+8], P [64][68],
// U/V' [64][BV+8]: D = 128: 150,528 bytes at BV 32, 175,104 at BV 64 (1 block per SM). The three
// products are gdn_chunk_math.cuh's, shared with gdn_chunked.cu.
// gdn_cp_norm_kernel: one warp per (row, value head) of the chunked sequences: out = norm_w ·
// o / sqrt(mean(o²) + eps) · silu(z), as the serial kernel does in place.
#include "backend/cuda/device_limits.h"
#include "backend/cuda/gdn_chunk_math.cuh"
#include "backend/cuda/gdn_common.cuh"

namespace qs::cuda::gdn {
namespace {

constexpr int kStateThreads = 256;

template <int D, int kBV>
struct StateSmem {
    static constexpr int CT = 64;
    static constexpr int LDS = kBV + 8, LDW = D + 4, LDQ = D + 4, LDK = D + 8, LDP = CT + 4, LDV = kBV + 8;
    static constexpr int oS = 0;
    static constexpr int oW = oS + D * LDS;
    static constexpr int oQ = oW + CT * LDW;
    static constexpr int oK = oQ + CT * LDQ;
    static constexpr int oP = oK + CT * LDK;
    static constexpr int oV = oP + CT * LDP;
    static constexpr int floats = oV + CT * LDV;
    static constexpr size_t bytes = size_t(floats) * sizeof(float);
};

template <int D, int kBV, bool BF16, bool X3>
__global__ void __launch_bounds__(kStateThreads, 1) gdn_cp_state_kernel(RecArgs p) {
    using L = StateSmem<D, kBV>;
    constexpr int CT = 64, NT = kStateThreads, D4 = D / 4;
    constexpr int LDS = L::LDS, LDW = L::LDW, LDQ = L::LDQ, LDK = L::LDK, LDP = L::LDP, LDV = L::LDV;
    static_assert(D % 32 == 0 && D <= 128 && (kBV == 32 || kBV == 64), "D, BV");

    const DeviceSeq sq = p.seqs[chunked_seq_of(p, blockIdx.z)];
    const int n = sq.num_tokens;
    if (p.chunk_min_tokens <= 0 || n < p.chunk_min_tokens || n <= 0) return;

    extern __shared__ float4 smem4[];
    float* const sm = reinterpret_cast<float*>(smem4);
    float* const sS = sm + L::oS;
    float* const sW = sm + L::oW;
    float* const sQ = sm + L::oQ;
    float* const sK = sm + L::oK;
    float* const sP = sm + L::oP;
    float* const sV = sm + L::oV;

    const int v0 = kBV * blockIdx.x, h = blockIdx.y;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int g = lane >> 2, t4 = lane & 3;
    const int dk = p.Dk, dv = p.Dv, Nv = p.Nv, Nk = p.Nk;
    const int kh = h / (Nv / Nk);
    const int64_t C = p.C, ZW = int64_t(Nv) * dv;

    // State slice into shared memory, zero-padded to D × BV.
    const int64_t sbase = (int64_t(sq.state_slot) * Nv + h) * dk * dv;
    for (int idx = tid; idx < D * (kBV / 4); idx += NT) {
        const int r = idx / (kBV / 4), cc = 4 * (idx % (kBV / 4));
        const float4 v = (r < dk && v0 + cc < dv) ? StateIO<BF16>::load(p.state, sbase + int64_t(r) * dv + v0 + cc)
                                                  : make_float4(0.f, 0.f, 0.f, 0.f);
        *reinterpret_cast<float4*>(sS + r * LDS + cc) = v;
    }

    // Warp tiling: 64 × BV products by m-tile mi (16 rows) and half (BV/2 columns);
    // the D × BV state update by m-tiles (warp / 2) + 4i and the same half.
    const int mi = warp >> 1, half = warp & 1;
    const int m0 = 16 * mi, nb0 = (kBV / 2) * half;
    constexpr int NJ = kBV / 16;
    constexpr int NMS = D / 16;             // 16-row tiles of S
    constexpr int MPW = (NMS + 3) / 4;      // per warp (some warps idle when D = 32)

    for (int t0 = 0; t0 < n; t0 += CT) {
        const int nc = min(CT, n - t0);
        const int64_t row0 = int64_t(sq.row_begin) + t0;
        const float glast = p.cpGam[(row0 + nc - 1) * Nv + h];
        const float el = expf(glast);

        // ---- the chunk's operands (zero rows / columns beyond).
        const float4 z4 = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll 2
        for (int idx = tid; idx < CT * D4; idx += NT) {
            const int r = idx / D4, cc = 4 * (idx % D4);
            float4 w4 = z4, q4 = z4, k4 = z4;
            if (r < nc && cc < dk) {
                const int64_t row = row0 + r;
                const float gam = p.cpGam[row * Nv + h];
                const float fq = p.cpRq[row * Nk + kh] * expf(gam);
                const float fk = p.cpRk[row * Nk + kh] * expf(glast - gam);
                const float* src = p.conv + row * C;
                w4 = ld4(p.cpW + (row * Nv + h) * dk + cc);
                q4 = ld4(src + kh * dk + cc);
                k4 = ld4(src + Nk * dk + kh * dk + cc);
                q4 = make_float4(q4.x * fq, q4.y * fq, q4.z * fq, q4.w * fq);
                k4 = make_float4(k4.x * fk, k4.y * fk, k4.z * fk, k4.w * fk);
            }
            *reinterpret_cast<float4*>(sW + r * LDW + cc) = w4;
            *reinterpret_cast<float4*>(sQ + r * LDQ + cc) = q4;
            *reinterpret_cast<float4*>(sK + r * LDK + cc) = k4;
        }
#pragma unroll 2
        for (int idx = tid; idx < CT * 16; idx += NT) {
            const int r = idx / 16, cc = 4 * (idx % 16);
            *reinterpret_cast<float4*>(sP + r * LDP + cc) = r < nc ? ld4(p.cpP + ((row0 + r) * Nv + h) * 64 + cc) : z4;
        }
        for (int idx = tid; idx < CT * (kBV / 4); idx += NT) {
            const int r = idx / (kBV / 4), cc = 4 * (idx % (kBV / 4));
            *reinterpret_cast<float4*>(sV + r * LDV + cc) =
                (r < nc && v0 + cc < dv) ? ld4(p.conv + (row0 + r) * C + 2 * Nk * dk + h * dv + v0 + cc) : z4;
        }
        __syncthreads();

        // ---- V' = U - W S, in place in sV (each thread rewrites only its own fragment).
        chunk_v_prime<X3, NJ>(sV, LDV, sW, LDW, sS, LDS, m0, nb0, D);
        __syncthreads();

        // ---- O = Q̃ S + P V' -> out (un-normalised).
        {
            float acc[NJ][4];
            chunk_output<X3, NJ>(
                acc, [&](int k, float (&a)[4]) { frag_a_rows(sQ, LDQ, m0, k, a); }, sS, LDS, sP, LDP, sV, LDV, m0,
                nb0, D);
#pragma unroll
            for (int j = 0; j < NJ; ++j)
#pragma unroll
                for (int e = 0; e < 4; e += 2) {
                    const int r = m0 + g + 8 * (e >> 1), cc = v0 + nb0 + 8 * j + 2 * t4;
                    if (r < nc && cc < dv)
                        *reinterpret_cast<float2*>(p.out + (row0 + r) * ZW + int64_t(h) * dv + cc) =
                            make_float2(acc[j][e], acc[j][e + 1]);
                }
        }

        // ---- S ← e^{γlast} S + K̃ᵀ V'.
        {
            float acc[MPW][NJ][4];
#pragma unroll
            for (int i = 0; i < MPW; ++i) {
                const int ms0 = 16 * (mi + 4 * i);
                if (ms0 >= D) continue;
                chunk_state_update<X3, NJ>(
                    acc[i], el, [&](int k, float (&a)[4]) { frag_a_cols(sK, LDK, ms0, k, a); },  // A(d, s) = K̃[s][d]
                    sS, LDS, sV, LDV, ms0, nb0, CT);
            }
            __syncthreads();  // every warp is done reading S, W, Q̃, K̃, P and V' of this chunk
#pragma unroll
            for (int i = 0; i < MPW; ++i) {
                const int ms0 = 16 * (mi + 4 * i);
                if (ms0 >= D) continue;
                store_tiles<NJ>(sS, LDS, ms0, nb0, acc[i]);
            }
        }
        // The next chunk's loads write W, Q̃, K̃, P, V (all read before the barrier above); its
        // first read of S comes after the loads' barrier.
    }
    __syncthreads();  // the last chunk's S update is visible
    for (int idx = tid; idx < D * (kBV / 4); idx += NT) {
        const int r = idx / (kBV / 4), cc = 4 * (idx % (kBV / 4));
        if (r < dk && v0 + cc < dv)
            StateIO<BF16>::store(p.state, sbase + int64_t(r) * dv + v0 + cc, *reinterpret_cast<const float4*>(sS + r * LDS + cc));
    }
}

// One warp per (row, value head); rows of sequences outside the chunked path are left alone.
__global__ void __launch_bounds__(256) gdn_cp_norm_kernel(RecArgs p) {
    const int lane = threadIdx.x & 31;
    const int64_t w = int64_t(blockIdx.x) * 8 + (threadIdx.x >> 5);
    if (w >= int64_t(p.T) * p.Nv) return;
    const int64_t row = w / p.Nv;
    const int h = int(w % p.Nv);
    const int n = p.seqs[p.row_seq[row]].num_tokens;
    if (p.chunk_min_tokens <= 0 || n < p.chunk_min_tokens) return;
    const int dv = p.Dv, e = 4 * lane;
    const int64_t off = row * int64_t(p.Nv) * dv + int64_t(h) * dv + e;
    const bool on = e < dv;
    const float4 o = on ? ld4(p.out + off) : make_float4(0.f, 0.f, 0.f, 0.f);
    float ss = o.x * o.x + o.y * o.y + o.z * o.z + o.w * o.w;
#pragma unroll
    for (int sh = 16; sh >= 1; sh >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, sh);
    if (!on) return;
    const float inv = 1.0f / sqrtf(ss / float(dv) + p.eps);
    const float4 z = ld4(p.z + off), nw = ld4(p.norm_w + e);
    st4(p.out + off, make_float4(nw.x * (o.x * inv) * silu_f(z.x), nw.y * (o.y * inv) * silu_f(z.y),
                                 nw.z * (o.z * inv) * silu_f(z.z), nw.w * (o.w * inv) * silu_f(z.w)));
}

template <int D, int kBV, bool BF16, bool X3>
void launch_state_t(const RecArgs& a, cudaStream_t stream) {
    constexpr size_t smem = StateSmem<D, kBV>::bytes;
    allow_dynamic_smem<gdn_cp_state_kernel<D, kBV, BF16, X3>>(smem);
    const dim3 grid(unsigned((a.Dv + kBV - 1) / kBV), unsigned(a.Nv), chunked_seq_blocks(a));
    if (grid.z > 0) {
        gdn_cp_state_kernel<D, kBV, BF16, X3><<<grid, kStateThreads, smem, stream>>>(a);
        QS_CUDA_CHECK_LAUNCH();
    }
    const int64_t warps = int64_t(a.T) * a.Nv;
    gdn_cp_norm_kernel<<<unsigned((warps + 7) / 8), 256, 0, stream>>>(a);
    QS_CUDA_CHECK_LAUNCH();
}

template <int D, int kBV>
void launch_state_bv(const RecArgs& a, bool bf16, bool x3, cudaStream_t stream) {
    if (bf16) {
        if (x3) launch_state_t<D, kBV, true, true>(a, stream);
        else launch_state_t<D, kBV, true, false>(a, stream);
    } else {
        if (x3) launch_state_t<D, kBV, false, true>(a, stream);
        else launch_state_t<D, kBV, false, false>(a, stream);
    }
}

}  // namespace

template <int D>
void launch_cp_state(const RecArgs& a, bool bf16, bool x3, int value_cols, cudaStream_t stream) {
    // 64 value columns per block only at D = 128 (the real shape), where it halves the blocks that
    // re-read a chunk's W, q and k; smaller heads always take 32.
    if constexpr (D == 128) {
        if (value_cols == 64) {
            launch_state_bv<128, 64>(a, bf16, x3, stream);
            return;
        }
    }
    launch_state_bv<D, 32>(a, bf16, x3, stream);
}

template void launch_cp_state<32>(const RecArgs&, bool, bool, int, cudaStream_t);
template void launch_cp_state<64>(const RecArgs&, bool, bool, int, cudaStream_t);
template void launch_cp_state<128>(const RecArgs&, bool, bool, int, cudaStream_t);

}  // namespace qs::cuda::gdn

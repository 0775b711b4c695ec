// Gated DeltaNet prefill versions 2-4 (16-bit tensor cores; bench/kernels/NOTES.md "v5"), step 3 of 3:
// every chunk's outputs at once, with the gated RMSNorm. Inputs from gdn_tc_prep.cu (q̂, k̂, γ) and
// gdn_tc_state.cu (V' in tcU, the chunk-start states tcH). CPU reference: src/backend/cpu/cpu_gdn.cpp.
//
// gdn_tc_out_kernel<D>: grid (chunk_grid_blocks, Nv) (block -> chunk: cp_chunk_of), 256
// threads. Per chunk of nc rows and value head h (S = the state at the chunk's start):
//   P = lower(q̂_r·k̂_s e^{γr-γs}) (diagonal included; bf16 mma, fp32, stored bf16);
//   o = e^{γr} q̂ S + P V' (bf16 mma, fp32 accumulation);
//   out = norm_w · o / sqrt(mean(o²) + eps) · silu(z).
// Shared memory (bf16): q̂, k̂, V' [64][D+8], Sᵀ [D][D+8], P [64][72], γ and the row sums (fp32):
// D = 128: 97,024 bytes (2 blocks per SM).
// X2 (version 3, NOTES.md "v5 accuracy"): q̂, k̂, V', S arrive as hi + lo (RecArgs::tc*l), every
// bf16 tile has a lo twin right after it, P is split on its way to shared memory, and the three
// products take three mma each (tc_mma_x): D = 128: 193,280 bytes (1 block per SM).
// Op (gdn_tc_math.cuh) is the operand format: "bf16" above reads fp16 for TcF16 (version 4).
// kEarly (version 5, TcF16 only): version 4's values bit for bit, the gate z loaded at the start
// (beside the tiles' cp.async) and the norm weights kept in shared memory (+D floats).
#include "backend/cuda/device_limits.h"
#include "backend/cuda/gdn_common.cuh"
#include "backend/cuda/gdn_tc_math.cuh"

namespace qs::cuda::gdn {
namespace {

constexpr int kTcOutThreads = 256;

template <int D, bool X2, bool kEarly = false>
struct TcOutSmem {
    static constexpr int CT = 64, LD = D + 8, LDP = CT + 8, NS = X2 ? 2 : 1;
    static constexpr int oQ = 0;
    static constexpr int oK = oQ + NS * 2 * CT * LD;
    static constexpr int oV = oK + NS * 2 * CT * LD;
    static constexpr int oS = oV + NS * 2 * CT * LD;
    static constexpr int oP = oS + NS * 2 * D * LD;
    static constexpr int oG = oP + NS * 2 * CT * LDP;  // float [64]
    static constexpr int oR = oG + 4 * CT;             // float [64][2]
    static constexpr int oNw = oR + 4 * 2 * CT;        // float [D] norm weights (kEarly)
    static constexpr size_t bytes = size_t(oNw) + (kEarly ? 4 * D : 0);
    // Lo twins, in elements after their hi tile.
    static constexpr int loQ = CT * LD, loS = D * LD, loP = CT * LDP;
};

template <int D, class Op, bool kEarly>
__global__ void __launch_bounds__(kTcOutThreads, Op::x2 ? 1 : 2) gdn_tc_out_kernel(RecArgs p) {
    constexpr bool X2 = Op::x2;
    static_assert(!(X2 && kEarly), "early gate loads: version 5 (fp16 operands) only");
    using L = TcOutSmem<D, X2, kEarly>;
    constexpr int CT = 64, NT = kTcOutThreads, LD = L::LD, LDP = L::LDP;
    static_assert(D % 32 == 0 && D <= 128, "D");

    GdnChunk ch;
    if (!cp_chunk_of(p, blockIdx.x, ch)) return;
    const int t0 = 64 * ch.chunk, nc = min(CT, ch.num_tokens - t0);
    const int64_t row0 = int64_t(ch.row_begin) + t0;

    extern __shared__ float4 smem4[];
    uint8_t* const sm = reinterpret_cast<uint8_t*>(smem4);
    uint16_t* const sQ = reinterpret_cast<uint16_t*>(sm + L::oQ);
    uint16_t* const sK = reinterpret_cast<uint16_t*>(sm + L::oK);
    uint16_t* const sV = reinterpret_cast<uint16_t*>(sm + L::oV);
    uint16_t* const sS = reinterpret_cast<uint16_t*>(sm + L::oS);
    uint16_t* const sP = reinterpret_cast<uint16_t*>(sm + L::oP);
    float* const sG = reinterpret_cast<float*>(sm + L::oG);
    float* const sR = reinterpret_cast<float*>(sm + L::oR);
    [[maybe_unused]] float* const sNw = reinterpret_cast<float*>(sm + L::oNw);

    const int h = blockIdx.y;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int dk = p.Dk, dv = p.Dv, Nv = p.Nv, Nk = p.Nk;
    const int kh = h / (Nv / Nk);

    // Two cp.async groups: q̂, k̂ (the P product's operands), then V' and the chunk-start state,
    // which land while P is computed.
    tc_cp_tile(sQ, LD, p.tcQ + (row0 * Nk + kh) * dk, int64_t(Nk) * dk, CT, D, nc, dk, tid, NT);
    tc_cp_tile(sK, LD, p.tcK + (row0 * Nk + kh) * dk, int64_t(Nk) * dk, CT, D, nc, dk, tid, NT);
    if constexpr (X2) {
        tc_cp_tile(sQ + L::loQ, LD, p.tcQl + (row0 * Nk + kh) * dk, int64_t(Nk) * dk, CT, D, nc, dk, tid, NT);
        tc_cp_tile(sK + L::loQ, LD, p.tcKl + (row0 * Nk + kh) * dk, int64_t(Nk) * dk, CT, D, nc, dk, tid, NT);
    }
    ptx::cp_async_commit();
    const int64_t key = ch.key;  // the chunk-start state's slot in tcH
    tc_cp_tile(sV, LD, p.tcU + (row0 * Nv + h) * dv, int64_t(Nv) * dv, CT, D, nc, dv, tid, NT);
    tc_cp_tile(sS, LD, p.tcH + (key * Nv + h) * dk * dv, dk, D, D, dv, dk, tid, NT);  // Sᵀ [Dv][Dk]
    if constexpr (X2) {
        tc_cp_tile(sV + L::loQ, LD, p.tcUl + (row0 * Nv + h) * dv, int64_t(Nv) * dv, CT, D, nc, dv, tid, NT);
        tc_cp_tile(sS + L::loS, LD, p.tcHl + (key * Nv + h) * dk * dv, dk, D, D, dv, dk, tid, NT);
    }
    ptx::cp_async_commit();
    if (tid < CT) sG[tid] = tid < nc ? p.tcGam[(row0 + tid) * Nv + h] : 0.f;

    const int mi = warp >> 1, half = warp & 1;
    const int m0 = 16 * mi;
    constexpr int NJ = D / 16;
    const int n0 = half * (D / 2);
    // The gate z (and the norm weights) are read only by the norm at the end. Version 4 loads them
    // there (into registers, before the barrier and before any store to out: a load after a store
    // to a pointer that may alias it cannot be moved above it). kEarly (version 5) issues the z
    // loads here, beside the tiles' cp.async, so that they land during the products, and keeps the
    // norm weights in shared memory (their registers would otherwise stay live across the products).
    const int64_t ZW = int64_t(Nv) * dv;
    float2 zs[NJ][2];
    [[maybe_unused]] float2 ws[NJ][2];
    auto load_gate = [&] {
        if constexpr (kEarly) {  // as below, from one row pointer per row (see the stores at the end)
            const int g = lane >> 2, t2 = 2 * (lane & 3);
#pragma unroll
            for (int e = 0; e < 4; e += 2) {
                const int r = m0 + g + 4 * e;
                const float* const zr = r < nc ? p.z + (row0 + r) * ZW + int64_t(h) * dv + n0 + t2 : nullptr;
#pragma unroll
                for (int j = 0; j < NJ; ++j) {
                    const bool on = zr != nullptr && n0 + 8 * j + t2 < dv;
                    zs[j][e / 2] = on ? *reinterpret_cast<const float2*>(zr + 8 * j) : make_float2(0.f, 0.f);
                }
            }
            return;
        }
        tc_pairs<NJ>(m0, n0, [&](int j, int e, int r, int cc) {
            const bool on = r < nc && cc < dv;
            zs[j][e / 2] = on ? *reinterpret_cast<const float2*>(p.z + (row0 + r) * ZW + int64_t(h) * dv + cc)
                              : make_float2(0.f, 0.f);
            if constexpr (!kEarly)
                ws[j][e / 2] = on ? *reinterpret_cast<const float2*>(p.norm_w + cc) : make_float2(0.f, 0.f);
        });
    };
    if constexpr (kEarly) {
        if (tid < D) sNw[tid] = tid < dv ? p.norm_w[tid] : 0.f;
        load_gate();
    }
    ptx::cp_async_wait<1>();  // q̂, k̂ (V', S may still be in flight)
    __syncthreads();

    // ---- P = lower(q̂ k̂ᵀ ⊙ e^{γr-γs}) -> sP (every entry written).
    {
        const int n0 = 32 * half;
        float acc[4][4];
        tc_zero<4>(acc);
        if (n0 <= m0 + 15)
            tc_mma_x<4, Op>(
                acc, 0, D, [&](int k, uint32_t (&a)[4], bool lo) { tc_a_rows(sQ + (lo ? L::loQ : 0), LD, m0, k, a); },
                [&](int k, int j, uint32_t (&b)[2], bool lo) { tc_b_cols(sK + (lo ? L::loQ : 0), LD, n0, k, j, b); });
        tc_pairs<4>(m0, n0, [&](int j, int e, int r, int cc) {
            const float x0 = cc <= r ? acc[j][e] * expf(sG[r] - sG[cc]) : 0.f;
            const float x1 = cc + 1 <= r ? acc[j][e + 1] * expf(sG[r] - sG[cc + 1]) : 0.f;
            if constexpr (X2) {
                uint32_t hi, lo;
                pack_split(x0, x1, hi, lo);
                *reinterpret_cast<uint32_t*>(sP + r * LDP + cc) = hi;
                *reinterpret_cast<uint32_t*>(sP + L::loP + r * LDP + cc) = lo;
            } else {
                *reinterpret_cast<uint32_t*>(sP + r * LDP + cc) = Op::pack(x0, x1);
            }
        });
    }
    ptx::cp_async_wait<0>();  // V', S
    __syncthreads();

    // ---- o = e^{γr} q̂ S + P V' (warp: rows m0, columns n0.. of D/2; P lower: k < m0 + 16).
    float acc[NJ][4];
    tc_zero<NJ>(acc);
    tc_mma_x<NJ, Op>(
        acc, 0, D, [&](int k, uint32_t (&a)[4], bool lo) { tc_a_rows(sQ + (lo ? L::loQ : 0), LD, m0, k, a); },
        [&](int k, int j, uint32_t (&b)[2], bool lo) {
            tc_b_cols(sS + (lo ? L::loS : 0), LD, n0, k, j, b);  // B(d, v) = Sᵀ[v][d]
        });
    const int g = lane >> 2;
    const float e0 = expf(sG[m0 + g]), e1 = expf(sG[m0 + g + 8]);
#pragma unroll
    for (int j = 0; j < NJ; ++j) {
        acc[j][0] *= e0;
        acc[j][1] *= e0;
        acc[j][2] *= e1;
        acc[j][3] *= e1;
    }
    tc_mma_x<NJ, Op>(
        acc, 0, m0 + 16, [&](int k, uint32_t (&a)[4], bool lo) { tc_a_rows(sP + (lo ? L::loP : 0), LDP, m0, k, a); },
        [&](int k, int j, uint32_t (&b)[2], bool lo) { tc_b_rows(sV + (lo ? L::loQ : 0), LD, n0, k, j, b); });

    // ---- gated RMSNorm over the row's Dv values (columns >= dv are zero: S, V' zero-filled).
    float ss0 = 0.f, ss1 = 0.f;
#pragma unroll
    for (int j = 0; j < NJ; ++j) {
        ss0 += acc[j][0] * acc[j][0] + acc[j][1] * acc[j][1];
        ss1 += acc[j][2] * acc[j][2] + acc[j][3] * acc[j][3];
    }
#pragma unroll
    for (int sh = 1; sh <= 2; sh <<= 1) {
        ss0 += __shfl_xor_sync(0xffffffffu, ss0, sh);
        ss1 += __shfl_xor_sync(0xffffffffu, ss1, sh);
    }
    if ((lane & 3) == 0) {
        sR[(m0 + g) * 2 + half] = ss0;
        sR[(m0 + g + 8) * 2 + half] = ss1;
    }
    if constexpr (!kEarly) load_gate();
    __syncthreads();
    if constexpr (kEarly) {
        // tc_pairs' pairs below, with each row's norm factor computed once (not per pair: the stores
        // to out may alias sR for the compiler) and its pairs addressed from one row pointer: the
        // per-pair index arithmetic and 1/sqrt were a large share of the kernel's instructions
        // (Nsight Compute, session 32). Same expressions, same bits.
#pragma unroll
        for (int e = 0; e < 4; e += 2) {
            const int r = m0 + g + 4 * e;
            if (r >= nc) continue;
            const float inv = 1.0f / sqrtf((sR[2 * r] + sR[2 * r + 1]) / float(dv) + p.eps);
            float* const o = p.out + (row0 + r) * ZW + int64_t(h) * dv + n0 + 2 * (lane & 3);
#pragma unroll
            for (int j = 0; j < NJ; ++j) {
                const int cc = n0 + 8 * j + 2 * (lane & 3);
                if (cc >= dv) continue;
                const float2 z = zs[j][e / 2];
                const float2 w = make_float2(sNw[cc], sNw[cc + 1]);
                *reinterpret_cast<float2*>(o + 8 * j) =
                    make_float2(w.x * (acc[j][e] * inv) * silu_f(z.x), w.y * (acc[j][e + 1] * inv) * silu_f(z.y));
            }
        }
        return;
    }
    tc_pairs<NJ>(m0, n0, [&](int j, int e, int r, int cc) {
        if (r >= nc || cc >= dv) return;
        const float inv = 1.0f / sqrtf((sR[2 * r] + sR[2 * r + 1]) / float(dv) + p.eps);
        const int64_t off = (row0 + r) * ZW + int64_t(h) * dv + cc;
        const float2 z = zs[j][e / 2];
        float2 w;
        if constexpr (kEarly) w = make_float2(sNw[cc], sNw[cc + 1]);
        else w = ws[j][e / 2];
        *reinterpret_cast<float2*>(p.out + off) =
            make_float2(w.x * (acc[j][e] * inv) * silu_f(z.x), w.y * (acc[j][e + 1] * inv) * silu_f(z.y));
    });
}

template <int D, class Op, bool kEarly = false>
void launch_t(const RecArgs& a, cudaStream_t stream) {
    constexpr size_t smem = TcOutSmem<D, Op::x2, kEarly>::bytes;
    allow_dynamic_smem<gdn_tc_out_kernel<D, Op, kEarly>>(smem);
    const dim3 grid(chunk_grid_blocks(a), unsigned(a.Nv));
    if (grid.x == 0) return;
    gdn_tc_out_kernel<D, Op, kEarly><<<grid, kTcOutThreads, smem, stream>>>(a);
    QS_CUDA_CHECK_LAUNCH();
}

}  // namespace

template <int D>
void launch_tc_out(const RecArgs& a, TcOperands ops, cudaStream_t stream) {
    if (ops == TcOperands::kBf16x2) launch_t<D, TcBf16x2>(a, stream);
    else if (ops == TcOperands::kF16) launch_t<D, TcF16>(a, stream);
    else if (ops == TcOperands::kF16Early) launch_t<D, TcF16, true>(a, stream);
    else launch_t<D, TcBf16>(a, stream);
}

template void launch_tc_out<32>(const RecArgs&, TcOperands, cudaStream_t);
template void launch_tc_out<64>(const RecArgs&, TcOperands, cudaStream_t);
template void launch_tc_out<128>(const RecArgs&, TcOperands, cudaStream_t);

}  // namespace qs::cuda::gdn

// Gated DeltaNet prefill versions 2-6 (16-bit tensor cores; bench/kernels/NOTES.md "v5"), step 2 of 3:
// the pass over the chunks in order, split over value columns so that one long prompt still fills
// the GPU. Inputs from gdn_tc_prep.cu (k̂, W, U, γ; RecArgs::tc*). CPU reference:
// src/backend/cpu/cpu_gdn.cpp.
//
// gdn_tc_state_kernel<D, BV, BF16>: grid (ceil(Dv/BV), Nv, chunked_seq_blocks), 128 threads (4 warps;
// 256 = 8 warps at BV 64); block = value columns [v0, v0 + BV) of one (chunked sequence, value head). The
// state slice S [Dk, BV] lives in the warps' fp32 accumulators for the whole call (read once, written
// once). Per chunk:
//   S (bf16) -> shared memory as Sᵀ, and from there to tcH[chunk key] (the output kernel's
//   chunk-start state, stored transposed: [Dv][Dk]);
//   V' = U - W S (bf16 mma, fp32) -> tcU in place (bf16);  S ← e^{γlast} S + k̂ᵀ (V' e^{γlast-γ}).
// The next chunk's W, k̂, U, γ arrive by cp.async into the other of two stages while this one
// computes. Shared memory (bf16): 2 × (W, k̂ [64][D+8], U [64][BV+8], γ fp32 [64]), Sᵀ [BV][D+8],
// (scaled V')ᵀ [BV][72] (transposed: the B fragments become 32-bit loads): D = 128: 93,696 bytes
// at BV 32 (2 blocks per SM), 82,944 at BV 16, 115,200 at BV 64 (2 blocks per SM: 2 × (115,200 +
// 1,024 reserved) of the SM's 233,472).
// BV 64 (version 6, fp16 operands only; NOTES.md "GDN state pass toward its byte floor"): the W and
// k̂ tiles each block pulls from L2 per chunk serve 64 columns instead of 32, so W crosses L2 → SM
// twice per value head (not 4 times) and k̂ 4 times (not 8). Eight warps: in the S phases warp w owns
// row tile w (+ 8i) and all 64 columns; in V' = U - W S row tile w % 4 and columns 32 (w / 4) ...
// + 31. Every accumulator sees the same mma.sync on the same fragments in the same k order as at
// BV 16 / 32, so the results equal them bit for bit.
// X2 (version 3, NOTES.md "v5 accuracy"): W, k̂, U arrive as hi + lo (RecArgs::tc*l), every bf16
// tile has a lo twin right after it, S and V'e^{γlast-γ} are split on their way to shared memory,
// both products take three mma (tc_mma_x), V' and the chunk-start states go out as hi + lo:
// D = 128: 186,880 bytes at BV 32, 165,376 at BV 16 (1 block per SM).
// Op (gdn_tc_math.cuh) is the operand format: "bf16" above reads fp16 for TcF16 (versions 4-6); the
// state's own storage (BF16: bf16, else fp32) does not depend on it.
#include "backend/cuda/device_limits.h"
#include "backend/cuda/gdn_common.cuh"
#include "backend/cuda/gdn_tc_math.cuh"

#include <type_traits>

namespace qs::cuda::gdn {
namespace {

// Warps per block: 4, or 8 at 64 value columns.
template <int BV>
constexpr int kTcStateThreads = BV == 64 ? 256 : 128;

template <int D, int kBV, bool X2>
struct TcStateSmem {
    static constexpr int CT = 64, LD = D + 8, LU = kBV + 8, NS = X2 ? 2 : 1;
    // Byte offsets; a stage is W, K, U, γ (each bf16 tile followed by its lo twin when X2).
    static constexpr int sW = 0;
    static constexpr int sK = sW + NS * 2 * CT * LD;
    static constexpr int sU = sK + NS * 2 * CT * LD;
    static constexpr int sG = sU + NS * 2 * CT * LU;
    static constexpr int stage = sG + 4 * CT;
    static constexpr int LST = D + 8, LVT = CT + 8;
    static constexpr int oS = 2 * stage;                 // uint16 [BV][LST] Sᵀ
    static constexpr int oV = oS + NS * 2 * kBV * LST;   // uint16 [BV][LVT] (V' e^{γlast-γ})ᵀ
    static constexpr size_t bytes = size_t(oV) + NS * 2 * kBV * LVT;
    // Lo twins, in elements after their hi tile.
    static constexpr int loW = CT * LD, loU = CT * LU, loS = kBV * LST, loV = kBV * LVT;
};

template <int D, int kBV, bool BF16, class Op>
__global__ void __launch_bounds__(kTcStateThreads<kBV>, Op::x2 ? 1 : 2) gdn_tc_state_kernel(RecArgs p) {
    constexpr bool X2 = Op::x2;
    using L = TcStateSmem<D, kBV, X2>;
    constexpr int NT = kTcStateThreads<kBV>, NW = NT / 32;
    constexpr int CT = 64, LD = L::LD, LU = L::LU, LST = L::LST, LVT = L::LVT;
    constexpr int NJ = kBV / 8;           // 8-column tiles: in the S phases every warp covers all BV columns
    constexpr int NMS = D / 16;           // 16-row tiles of S
    constexpr int MPW = (NMS + NW - 1) / NW;  // per warp (warps past NMS idle in the S phases: D = 32, 64)
    constexpr int NWC = NW / 4;           // V' = U - W S: the 4 row tiles of a chunk × NWC column groups
    constexpr int NJV = NJ / NWC;         // 8-column tiles per warp there
    static_assert(D % 32 == 0 && D <= 128 && (kBV == 16 || kBV == 32 || kBV == 64), "D, BV");
    static_assert(!X2 || kBV <= 32, "split operands at 64 columns do not fit in shared memory");
    static_assert(L::loW > 0 && L::loU > 0 && L::loS > 0 && L::loV > 0, "lo twins");  // (also: referenced without X2)

    const int s = chunked_seq_of(p, blockIdx.z);
    const DeviceSeq sq = p.seqs[s];
    const int n = sq.num_tokens;
    if (p.chunk_min_tokens <= 0 || n < p.chunk_min_tokens || n <= 0) return;

    extern __shared__ float4 smem4[];
    uint8_t* const sm = reinterpret_cast<uint8_t*>(smem4);
    uint16_t* const sS = reinterpret_cast<uint16_t*>(sm + L::oS);
    uint16_t* const sVs = reinterpret_cast<uint16_t*>(sm + L::oV);

    const int v0 = kBV * blockIdx.x, h = blockIdx.y;
    const int tid = threadIdx.x, warp = tid >> 5;
    const int dk = p.Dk, dv = p.Dv, Nv = p.Nv, Nk = p.Nk;
    const int kh = h / (Nv / Nk);
    const int vcols = min(kBV, dv - v0);
    const int64_t key = int64_t(s) + sq.row_begin / 64;  // chunk c's tcH slice: key + c

    // Loads chunk i's operands into stage st (one cp.async group per call, empty past the end).
    auto issue = [&](int i, int st) {
        if (64 * i < n) {
            uint8_t* const b = sm + st * L::stage;
            const int nc = min(CT, n - 64 * i);
            const int64_t row0 = int64_t(sq.row_begin) + 64 * i;
            tc_cp_tile(reinterpret_cast<uint16_t*>(b + L::sW), LD, p.tcW + (row0 * Nv + h) * dk, int64_t(Nv) * dk, CT, D,
                       nc, dk, tid, NT);
            tc_cp_tile(reinterpret_cast<uint16_t*>(b + L::sK), LD, p.tcK + (row0 * Nk + kh) * dk, int64_t(Nk) * dk, CT, D,
                       nc, dk, tid, NT);
            tc_cp_tile(reinterpret_cast<uint16_t*>(b + L::sU), LU, p.tcU + (row0 * Nv + h) * dv + v0, int64_t(Nv) * dv, CT,
                       kBV, nc, vcols, tid, NT);
            if constexpr (X2) {
                tc_cp_tile(reinterpret_cast<uint16_t*>(b + L::sW) + L::loW, LD, p.tcWl + (row0 * Nv + h) * dk,
                           int64_t(Nv) * dk, CT, D, nc, dk, tid, NT);
                tc_cp_tile(reinterpret_cast<uint16_t*>(b + L::sK) + L::loW, LD, p.tcKl + (row0 * Nk + kh) * dk,
                           int64_t(Nk) * dk, CT, D, nc, dk, tid, NT);
                tc_cp_tile(reinterpret_cast<uint16_t*>(b + L::sU) + L::loU, LU, p.tcUl + (row0 * Nv + h) * dv + v0,
                           int64_t(Nv) * dv, CT, kBV, nc, vcols, tid, NT);
            }
            float* const g = reinterpret_cast<float*>(b + L::sG);
            if (tid < CT) {
                if (tid < nc) ptx::cp_async4(ptx::smem_u32(g + tid), p.tcGam + (row0 + tid) * Nv + h);
                else g[tid] = 0.f;  // the stage's previous readers finished before this call's barrier
            }
        }
        ptx::cp_async_commit();
    };
    issue(0, 0);
    issue(1, 1);

    // The state slice into the accumulators (rows ms0 = 16 (warp + NW i), all BV columns).
    const int64_t sbase = (int64_t(sq.state_slot) * Nv + h) * dk * dv;
    float acc[MPW][NJ][4];
#pragma unroll
    for (int i = 0; i < MPW; ++i) {
        const int ms0 = 16 * (warp + NW * i);
        tc_pairs<NJ>(ms0, 0, [&](int j, int e, int r, int cc) {
            float x0 = 0.f, x1 = 0.f;
            if (ms0 < D && r < dk && cc < vcols) {
                const int64_t at = sbase + int64_t(r) * dv + v0 + cc;
                if (BF16) {
                    const uint32_t u = *reinterpret_cast<const uint32_t*>(static_cast<const uint16_t*>(p.state) + at);
                    x0 = from_bf16(uint16_t(u & 0xffffu));
                    x1 = from_bf16(uint16_t(u >> 16));
                } else {
                    const float2 f = *reinterpret_cast<const float2*>(static_cast<const float*>(p.state) + at);
                    x0 = f.x;
                    x1 = f.y;
                }
            }
            acc[i][j][e] = x0;
            acc[i][j][e + 1] = x1;
        });
    }

    const int nchunks = (n + CT - 1) / CT;
#pragma unroll 1
    for (int ci = 0; ci < nchunks; ++ci) {
        const int st = ci & 1;
        const uint8_t* const b = sm + st * L::stage;
        const uint16_t* const cW = reinterpret_cast<const uint16_t*>(b + L::sW);
        const uint16_t* const cK = reinterpret_cast<const uint16_t*>(b + L::sK);
        const uint16_t* const cU = reinterpret_cast<const uint16_t*>(b + L::sU);
        const float* const cG = reinterpret_cast<const float*>(b + L::sG);
        const int nc = min(CT, n - 64 * ci);
        const int64_t row0 = int64_t(sq.row_begin) + 64 * ci;
        ptx::cp_async_wait<1>();  // chunk ci's group has landed (ci + 1's may still be in flight)
        __syncthreads();
        const float glast = cG[nc - 1], el = expf(glast);

        // ---- S (bf16) -> shared memory, transposed; from there to the chunk-start state tcH.
#pragma unroll
        for (int i = 0; i < MPW; ++i) {
            const int ms0 = 16 * (warp + NW * i);
            if (ms0 >= D) continue;
            tc_pairs<NJ>(ms0, 0, [&](int j, int e, int r, int cc) {
                uint32_t u;
                [[maybe_unused]] uint32_t ul;
                if constexpr (X2) pack_split(acc[i][j][e], acc[i][j][e + 1], u, ul);
                else u = Op::pack(acc[i][j][e], acc[i][j][e + 1]);
                sS[cc * LST + r] = uint16_t(u & 0xffffu);
                sS[(cc + 1) * LST + r] = uint16_t(u >> 16);
                if constexpr (X2) {
                    sS[L::loS + cc * LST + r] = uint16_t(ul & 0xffffu);
                    sS[L::loS + (cc + 1) * LST + r] = uint16_t(ul >> 16);
                }
            });
        }
        __syncthreads();
        {
            uint16_t* const H = p.tcH + ((key + ci) * Nv + h) * dk * dv + int64_t(v0) * dk;  // Sᵀ rows v0..
            for (int idx = tid; idx < vcols * (dk / 8); idx += NT) {
                const int v = idx / (dk / 8), d = 8 * (idx % (dk / 8));
                *reinterpret_cast<uint4*>(H + int64_t(v) * dk + d) = *reinterpret_cast<const uint4*>(sS + v * LST + d);
            }
            if constexpr (X2) {
                uint16_t* const Hl = p.tcHl + ((key + ci) * Nv + h) * dk * dv + int64_t(v0) * dk;
                for (int idx = tid; idx < vcols * (dk / 8); idx += NT) {
                    const int v = idx / (dk / 8), d = 8 * (idx % (dk / 8));
                    *reinterpret_cast<uint4*>(Hl + int64_t(v) * dk + d) =
                        *reinterpret_cast<const uint4*>(sS + L::loS + v * LST + d);
                }
            }
        }

        // ---- V' = U - W S (warp: rows 16 (warp % 4), columns n0 + [0, 8 NJV)) -> tcU; V' e^{γlast-γ} -> sVs.
        {
            const int m0 = NWC == 1 ? 16 * warp : 16 * (warp % 4), n0 = NWC == 1 ? 0 : 8 * NJV * (warp / 4);
            float av[NJV][4];
            tc_zero<NJV>(av);
            tc_mma_x<NJV, Op>(
                av, 0, D, [&](int k, uint32_t (&a)[4], bool lo) { tc_a_rows(cW + (lo ? L::loW : 0), LD, m0, k, a); },
                [&](int k, int j, uint32_t (&bb)[2], bool lo) {
                    tc_b_cols(sS + (lo ? L::loS : 0), LST, n0, k, j, bb);
                });
            tc_pairs<NJV>(m0, n0, [&](int j, int e, int r, int cc) {
                const uint32_t u = *reinterpret_cast<const uint32_t*>(cU + r * LU + cc);
                float x0 = Op::from(uint16_t(u & 0xffffu)) - av[j][e];
                float x1 = Op::from(uint16_t(u >> 16)) - av[j][e + 1];
                if constexpr (X2) {
                    const uint32_t ul = *reinterpret_cast<const uint32_t*>(cU + L::loU + r * LU + cc);
                    x0 += from_bf16(uint16_t(ul & 0xffffu));
                    x1 += from_bf16(uint16_t(ul >> 16));
                }
                const int64_t ou = ((row0 + r) * Nv + h) * dv + v0 + cc;
                const float f = expf(glast - cG[r]);
                uint32_t w;
                if constexpr (X2) {
                    uint32_t wl;
                    if (r < nc && cc < vcols) {
                        uint32_t hi, lo;
                        pack_split(x0, x1, hi, lo);
                        *reinterpret_cast<uint32_t*>(p.tcU + ou) = hi;
                        *reinterpret_cast<uint32_t*>(p.tcUl + ou) = lo;
                    }
                    pack_split(x0 * f, x1 * f, w, wl);
                    sVs[L::loV + cc * LVT + r] = uint16_t(wl & 0xffffu);
                    sVs[L::loV + (cc + 1) * LVT + r] = uint16_t(wl >> 16);
                } else {
                    if (r < nc && cc < vcols) *reinterpret_cast<uint32_t*>(p.tcU + ou) = Op::pack(x0, x1);
                    w = Op::pack(x0 * f, x1 * f);
                }
                sVs[cc * LVT + r] = uint16_t(w & 0xffffu);
                sVs[(cc + 1) * LVT + r] = uint16_t(w >> 16);
            });
        }
        __syncthreads();

        // ---- S ← e^{γlast} S + k̂ᵀ (V' e^{γlast-γ}) (A(d, s) = k̂[s][d]).
#pragma unroll
        for (int i = 0; i < MPW; ++i) {
            const int ms0 = 16 * (warp + NW * i);
            if (ms0 >= D) continue;
#pragma unroll
            for (int j = 0; j < NJ; ++j)
#pragma unroll
                for (int e = 0; e < 4; ++e) acc[i][j][e] *= el;
            tc_mma_x<NJ, Op>(
                acc[i], 0, CT, [&](int k, uint32_t (&a)[4], bool lo) { tc_a_cols(cK + (lo ? L::loW : 0), LD, ms0, k, a); },
                [&](int k, int j, uint32_t (&bb)[2], bool lo) { tc_b_cols(sVs + (lo ? L::loV : 0), LVT, 0, k, j, bb); });
        }
        __syncthreads();  // every warp is done with this stage, sS and sVs
        issue(ci + 2, st);
    }
    ptx::cp_async_wait<0>();

    // The final state.
#pragma unroll
    for (int i = 0; i < MPW; ++i) {
        const int ms0 = 16 * (warp + NW * i);
        if (ms0 >= D) continue;
        tc_pairs<NJ>(ms0, 0, [&](int j, int e, int r, int cc) {
            if (r >= dk || cc >= vcols) return;
            const int64_t at = sbase + int64_t(r) * dv + v0 + cc;
            if (BF16)
                *reinterpret_cast<uint32_t*>(static_cast<uint16_t*>(p.state) + at) = pack_bf16(acc[i][j][e], acc[i][j][e + 1]);
            else
                *reinterpret_cast<float2*>(static_cast<float*>(p.state) + at) = make_float2(acc[i][j][e], acc[i][j][e + 1]);
        });
    }
}

template <int D, int kBV, bool BF16, class Op>
void launch_t(const RecArgs& a, cudaStream_t stream) {
    constexpr size_t smem = TcStateSmem<D, kBV, Op::x2>::bytes;
    constexpr int threads = kTcStateThreads<kBV>;
    allow_dynamic_smem<gdn_tc_state_kernel<D, kBV, BF16, Op>>(smem);
    const dim3 grid(unsigned((a.Dv + kBV - 1) / kBV), unsigned(a.Nv), chunked_seq_blocks(a));
    if (grid.z == 0) return;
    gdn_tc_state_kernel<D, kBV, BF16, Op><<<grid, threads, smem, stream>>>(a);
    QS_CUDA_CHECK_LAUNCH();
}

template <int D, class Op>
void launch_x(const RecArgs& a, bool bf16, int value_cols, cudaStream_t stream) {
    if constexpr (std::is_same_v<Op, TcF16>) {  // 64 columns: fp16 operands (version 6) only
        if (value_cols == 64) {
            if (bf16) launch_t<D, 64, true, Op>(a, stream);
            else launch_t<D, 64, false, Op>(a, stream);
            return;
        }
    }
    if (value_cols == 16) {
        if (bf16) launch_t<D, 16, true, Op>(a, stream);
        else launch_t<D, 16, false, Op>(a, stream);
    } else {
        if (bf16) launch_t<D, 32, true, Op>(a, stream);
        else launch_t<D, 32, false, Op>(a, stream);
    }
}

}  // namespace

template <int D>
void launch_tc_state(const RecArgs& a, bool bf16, TcOperands ops, int value_cols, cudaStream_t stream) {
    if (ops == TcOperands::kBf16x2) launch_x<D, TcBf16x2>(a, bf16, value_cols, stream);
    else if (ops == TcOperands::kF16 || ops == TcOperands::kF16Early) launch_x<D, TcF16>(a, bf16, value_cols, stream);
    else launch_x<D, TcBf16>(a, bf16, value_cols, stream);
}

template void launch_tc_state<32>(const RecArgs&, bool, TcOperands, int, cudaStream_t);
template void launch_tc_state<64>(const RecArgs&, bool, TcOperands, int, cudaStream_t);
template void launch_tc_state<128>(const RecArgs&, bool, TcOperands, int, cudaStream_t);

}  // namespace qs::cuda::gdn

// Gated DeltaNet prefill versions 2-4 (16-bit tensor cores; bench/kernels/NOTES.md "v5"), step 1 of 3:
// every chunk of every chunked sequence at once. CPU reference: src/backend/cpu/cpu_gdn.cpp.
//
// gdn_tc_prep_kernel<D>: grid (chunk_grid_blocks, Nv) (block -> chunk: cp_chunk_of), 256
// threads. Per chunk of nc <= 64 rows (rows >= nc zero) and value head h:
//   k̂ = k / ||k||, q̂ = q / ||q|| / sqrt(Dk) (fp32, then bf16 -> tcK, tcQ by the first value head of
//   the key head); β; γ = cumsum(g) -> tcGam;
//   L = strict_lower(β_r k̂_r·k̂_s e^{γr-γs}) (bf16 mma, fp32 accumulation);
//   T = (I + L)^-1 in fp32 (invert_unit_lower64, gdn_chunk_math.cuh), then rounded to bf16;
//   W = T (k̂ β e^γ) -> tcW, U = T (v β) -> tcU (bf16 mma, fp32 accumulation, stored bf16).
// Shared memory: K̂ bf16 [64][D+8], (K̂βe^γ)ᵀ and (Vβ)ᵀ bf16 [D][72] (transposed: the WY products'
// B fragments become 32-bit loads), L/T fp32 [64][68], scratch 768 floats, T bf16 [64][72],
// 3 × 64 floats: D = 128: 84,736 bytes (2 blocks per SM).
// X2 (version 3, NOTES.md "v5 accuracy"): every bf16 tile above has a lo twin (x − bf16(x)) right
// after it, the products take three mma (tc_mma_x) and q̂, k̂, W, U go out as hi + lo
// (RecArgs::tc*l): D = 128: 148,224 bytes (1 block per SM).
// Op (gdn_tc_math.cuh) is the operand format: "bf16" above reads fp16 for TcF16 (version 4).
// kEarly (version 5, TcF16 only; NOTES.md "GDN prep and output toward their byte floors"): version
// 4's values bit for bit; each warp's 8 rows of k, v, q are loaded before the gate phase (one memory
// round trip instead of one per row), and the transposed tiles' words are swizzled by row (tc_swz)
// so that their 16-bit column stores are free of bank conflicts (4-way otherwise).
#include "backend/cuda/device_limits.h"
#include "backend/cuda/gdn_chunk_math.cuh"
#include "backend/cuda/gdn_common.cuh"
#include "backend/cuda/gdn_tc_math.cuh"

namespace qs::cuda::gdn {
namespace {

constexpr int kTcPrepThreads = 256;
// kEarly: rows of a warp in flight ahead of their use (of its 8; 8 = all issued before the gates).
constexpr int kPrepPre = 8;
static_assert(kPrepPre >= 1 && kPrepPre <= 8, "a warp has 8 rows");

template <int D, bool X2>
struct TcPrepSmem {
    static constexpr int CT = 64, LD = D + 8, LDT = CT + 4, LDTB = CT + 8, NS = X2 ? 2 : 1;
    // Lo twins (X2), in elements after their hi tile.
    static constexpr int loK = CT * LD, loKw = D * LDTB, loTb = CT * LDTB;
    // Byte offsets.
    static constexpr int oK = 0;                          // uint16 [64][LD] k̂
    static constexpr int oKw = oK + NS * 2 * CT * LD;     // uint16 [D][LDTB] (k̂ β e^γ)ᵀ
    static constexpr int oV = oKw + NS * 2 * D * LDTB;    // uint16 [D][LDTB] (v β)ᵀ
    static constexpr int oT = oV + NS * 2 * D * LDTB;     // float [64][LDT] L, then T
    static constexpr int oScr = oT + 4 * CT * LDT;        // float [768]
    static constexpr int oTb = oScr + 4 * 768;            // uint16 [64][LDTB] T in bf16
    static constexpr int oVec = oTb + NS * 2 * CT * LDTB; // float beta, gam, fk [64] each
    static constexpr size_t bytes = size_t(oVec) + 3 * 4 * CT;
};

template <int D, class Op, bool kEarly>
__global__ void __launch_bounds__(kTcPrepThreads, Op::x2 ? 1 : 2) gdn_tc_prep_kernel(RecArgs p) {
    constexpr bool X2 = Op::x2;
    static_assert(!(X2 && kEarly), "early row loads: version 5 (fp16 operands) only");
    using L = TcPrepSmem<D, X2>;
    constexpr int CT = 64, NT = kTcPrepThreads, LD = L::LD, LDT = L::LDT, LDTB = L::LDTB;
    static_assert(D % 32 == 0 && D <= 128, "D");
    static_assert(L::loK > 0 && L::loKw > 0 && L::loTb > 0, "lo twins");  // (also: referenced without X2)

    GdnChunk ch;
    if (!cp_chunk_of(p, blockIdx.x, ch)) return;
    const int t0 = 64 * ch.chunk, nc = min(CT, ch.num_tokens - t0);
    const int64_t row0 = int64_t(ch.row_begin) + t0;

    extern __shared__ float4 smem4[];
    uint8_t* const sm = reinterpret_cast<uint8_t*>(smem4);
    uint16_t* const sK = reinterpret_cast<uint16_t*>(sm + L::oK);
    uint16_t* const sKw = reinterpret_cast<uint16_t*>(sm + L::oKw);
    uint16_t* const sV = reinterpret_cast<uint16_t*>(sm + L::oV);
    float* const sT = reinterpret_cast<float*>(sm + L::oT);
    float* const sScr = reinterpret_cast<float*>(sm + L::oScr);
    uint16_t* const sTb = reinterpret_cast<uint16_t*>(sm + L::oTb);
    float* const sBeta = reinterpret_cast<float*>(sm + L::oVec);
    float* const sGam = sBeta + CT;
    float* const sFk = sGam + CT;

    const int h = blockIdx.y;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int dk = p.Dk, dv = p.Dv, Nv = p.Nv, Nk = p.Nk;
    const int kh = h / (Nv / Nk);
    const bool head_writer = (h % (Nv / Nk)) == 0;  // writes the key head's q̂, k̂
    const int64_t C = p.C;

    // ---- rows, one warp each: k̂ and k̂ β e^γ, v β (and q̂ to the workspace), bf16.
    // The row's k, v and q are loaded before any store: the compiler may not move a load from
    // p.conv above a store to the workspace (they could alias), so loads interleaved with the
    // stores would wait one memory latency each.
    constexpr int NE = D / 32, RPW = CT / (NT / 32);  // elements per lane and row; rows per warp
    auto load_row = [&](int r, float (&kv)[NE], float (&vx)[NE], float (&qv)[NE]) {
        const bool rv = r < nc;
        const float* src = p.conv + (row0 + r) * C;
#pragma unroll
        for (int j = 0; j < NE; ++j) {
            const int e = lane + 32 * j;
            kv[j] = (rv && e < dk) ? src[Nk * dk + kh * dk + e] : 0.f;
            vx[j] = (rv && e < dv) ? src[2 * Nk * dk + h * dv + e] : 0.f;
            qv[j] = (head_writer && rv && e < dk) ? src[kh * dk + e] : 0.f;
        }
    };
    auto row = [&](int r, const float (&kv)[NE], const float (&vx)[NE], const float (&qv)[NE]) {
        const bool rv = r < nc;
        float ss = 0.f;
#pragma unroll
        for (int j = 0; j < NE; ++j) ss = fmaf(kv[j], kv[j], ss);
#pragma unroll
        for (int sh = 16; sh >= 1; sh >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, sh);
        const float fk = 1.0f / sqrtf(ss + 1e-6f), fw = sFk[r], fb = sBeta[r];
#pragma unroll
        for (int j = 0; j < NE; ++j) {
            const int e = lane + 32 * j;
            const float kn = kv[j] * fk;
            const float vv = vx[j];
            if constexpr (X2) {
                uint16_t hi, lo;
                split_bf16(kn, hi, lo);
                sK[r * LD + e] = hi;
                sK[L::loK + r * LD + e] = lo;
                if (head_writer && rv && e < dk) {
                    p.tcK[((row0 + r) * Nk + kh) * dk + e] = hi;
                    p.tcKl[((row0 + r) * Nk + kh) * dk + e] = lo;
                }
                split_bf16(kn * fw, hi, lo);
                sKw[e * LDTB + r] = hi;
                sKw[L::loKw + e * LDTB + r] = lo;
                split_bf16(vv * fb, hi, lo);
                sV[e * LDTB + r] = hi;
                sV[L::loKw + e * LDTB + r] = lo;
            } else {
                const int rs = kEarly ? tc_swz(e, r) : r;  // the transposed tiles' column (swizzled: kEarly)
                sK[r * LD + e] = Op::to(kn);
                sKw[e * LDTB + rs] = Op::to(kn * fw);
                if (head_writer && rv && e < dk) p.tcK[((row0 + r) * Nk + kh) * dk + e] = Op::to(kn);
                sV[e * LDTB + rs] = Op::to(vv * fb);
            }
        }
        if (head_writer && rv) {
            float qq = 0.f;
#pragma unroll
            for (int j = 0; j < NE; ++j) qq = fmaf(qv[j], qv[j], qq);
#pragma unroll
            for (int sh = 16; sh >= 1; sh >>= 1) qq += __shfl_xor_sync(0xffffffffu, qq, sh);
            const float fq = p.q_scale / sqrtf(qq + 1e-6f);
#pragma unroll
            for (int j = 0; j < NE; ++j) {
                const int e = lane + 32 * j;
                if (e >= dk) continue;
                if constexpr (X2) {
                    uint16_t hi, lo;
                    split_bf16(qv[j] * fq, hi, lo);
                    p.tcQ[((row0 + r) * Nk + kh) * dk + e] = hi;
                    p.tcQl[((row0 + r) * Nk + kh) * dk + e] = lo;
                } else {
                    p.tcQ[((row0 + r) * Nk + kh) * dk + e] = Op::to(qv[j] * fq);
                }
            }
        }
    };
    // ---- gates; γ = cumsum(g) by warp 0 (after the barrier: it reads all 64 rows).
    // kEarly (version 5): the warp's first kPrepPre rows are loaded before the gates, and each later
    // row kPrepPre rows ahead of its use, so that a warp waits on ~one memory latency for its rows
    // (and the gates' own loads overlap it) instead of one per row (NOTES.md "GDN prep and output
    // toward their byte floors").
    [[maybe_unused]] float ek[RPW][NE], ev[RPW][NE], eq[RPW][NE];
    if constexpr (kEarly) {
#pragma unroll
        for (int i = 0; i < kPrepPre; ++i) load_row(warp + 8 * i, ek[i], ev[i], eq[i]);
    }
    if (tid < CT) {
        float beta = 0.f, gg = 0.f;
        if (tid < nc) {
            const int64_t row = row0 + tid;
            beta = sigmoid_f(p.b[row * Nv + h]);
            gg = -expf(p.A_log[h]) * softplus_f(p.a[row * Nv + h] + p.dt_bias[h]);
        }
        sBeta[tid] = beta;
        sGam[tid] = gg;
    }
    __syncthreads();
    if (warp == 0) {
        const float g0 = sGam[2 * lane], g1 = sGam[2 * lane + 1];
        float inc = g0 + g1;
#pragma unroll
        for (int off = 1; off < 32; off <<= 1) {
            const float u = __shfl_up_sync(0xffffffffu, inc, off);
            if (lane >= off) inc += u;
        }
        const float ga = inc - g1, gb = inc;  // γ at rows 2·lane, 2·lane + 1
        sGam[2 * lane] = ga;
        sGam[2 * lane + 1] = gb;
        sFk[2 * lane] = sBeta[2 * lane] * expf(ga);
        sFk[2 * lane + 1] = sBeta[2 * lane + 1] * expf(gb);
        if (2 * lane < nc) p.tcGam[(row0 + 2 * lane) * Nv + h] = ga;
        if (2 * lane + 1 < nc) p.tcGam[(row0 + 2 * lane + 1) * Nv + h] = gb;
    }
    __syncthreads();

    if constexpr (kEarly) {
#pragma unroll
        for (int i = 0; i < RPW; ++i) {
            const int ip = i + kPrepPre;  // the row kPrepPre ahead, if the warp has one (% RPW: in bounds)
            if (ip < RPW) load_row(warp + 8 * ip, ek[ip % RPW], ev[ip % RPW], eq[ip % RPW]);
            row(warp + 8 * i, ek[i], ev[i], eq[i]);
        }
    } else {
#pragma unroll 1
        for (int r = warp; r < CT; r += NT / 32) {
            float kv[NE], vx[NE], qv[NE];
            load_row(r, kv, vx, qv);
            row(r, kv, vx, qv);
        }
    }
    __syncthreads();

    // Warp tiling of the 64-row products: m-tile mi (16 rows), half of the columns.
    const int mi = warp >> 1, half = warp & 1;
    const int m0 = 16 * mi;

    // ---- L = strict_lower(β_r k̂_r·k̂_s e^{γr-γs}) into sT (all 64 × 64 entries written).
    {
        const int n0 = 32 * half;
        float acc[4][4];
        tc_zero<4>(acc);
        if (n0 <= m0 + 15)
            tc_mma_x<4, Op>(
                acc, 0, D, [&](int k, uint32_t (&a)[4], bool lo) { tc_a_rows(sK + (lo ? L::loK : 0), LD, m0, k, a); },
                [&](int k, int j, uint32_t (&b)[2], bool lo) { tc_b_cols(sK + (lo ? L::loK : 0), LD, n0, k, j, b); });
        tc_pairs<4>(m0, n0, [&](int j, int e, int r, int cc) {
#pragma unroll
            for (int u = 0; u < 2; ++u)
                sT[r * LDT + cc + u] = cc + u < r ? sBeta[r] * acc[j][e + u] * expf(sGam[r] - sGam[cc + u]) : 0.f;
        });
    }
    __syncthreads();

    // ---- T = (I + L)^-1 in place (fp32), then its bf16 copy.
    invert_unit_lower64(sT, LDT, sScr);
    for (int i = tid; i < CT * CT / 2; i += NT) {
        const int r = i / (CT / 2), cc = 2 * (i % (CT / 2));
        if constexpr (X2) {
            uint32_t hi, lo;
            pack_split(sT[r * LDT + cc], sT[r * LDT + cc + 1], hi, lo);
            *reinterpret_cast<uint32_t*>(sTb + r * LDTB + cc) = hi;
            *reinterpret_cast<uint32_t*>(sTb + L::loTb + r * LDTB + cc) = lo;
        } else {
            *reinterpret_cast<uint32_t*>(sTb + r * LDTB + cc) = Op::pack(sT[r * LDT + cc], sT[r * LDT + cc + 1]);
        }
    }
    __syncthreads();

    // ---- W = T (k̂ β e^γ) -> tcW, U = T (v β) -> tcU (T lower triangular: k < m0 + 16).
    {
        constexpr int NJ = D / 16;
        const int n0 = half * (D / 2);
        float aw[NJ][4], au[NJ][4];
        tc_zero<NJ>(aw);
        tc_zero<NJ>(au);
#pragma unroll 1
        for (int k = 0; k < m0 + 16; k += 16) {
            uint32_t a[4];
            [[maybe_unused]] uint32_t al[4];
            tc_a_rows(sTb, LDTB, m0, k, a);
            if constexpr (X2) tc_a_rows(sTb + L::loTb, LDTB, m0, k, al);
#pragma unroll
            for (int j = 0; j < NJ; ++j) {
                uint32_t b[2];
                if constexpr (X2) {  // Th·Bl + Tl·Bh + Th·Bh (tc_mma_x's order)
                    tc_b_cols(sKw + L::loKw, LDTB, n0, k, j, b);
                    Op::mma(aw[j], a, b[0], b[1]);
                    tc_b_cols(sV + L::loKw, LDTB, n0, k, j, b);
                    Op::mma(au[j], a, b[0], b[1]);
                    tc_b_cols(sKw, LDTB, n0, k, j, b);
                    Op::mma(aw[j], al, b[0], b[1]);
                    Op::mma(aw[j], a, b[0], b[1]);
                    tc_b_cols(sV, LDTB, n0, k, j, b);
                    Op::mma(au[j], al, b[0], b[1]);
                    Op::mma(au[j], a, b[0], b[1]);
                } else if constexpr (kEarly) {
                    tc_b_cols_swz(sKw, LDTB, n0, k, j, b);
                    Op::mma(aw[j], a, b[0], b[1]);
                    tc_b_cols_swz(sV, LDTB, n0, k, j, b);
                    Op::mma(au[j], a, b[0], b[1]);
                } else {
                    tc_b_cols(sKw, LDTB, n0, k, j, b);
                    Op::mma(aw[j], a, b[0], b[1]);
                    tc_b_cols(sV, LDTB, n0, k, j, b);
                    Op::mma(au[j], a, b[0], b[1]);
                }
            }
        }
        if constexpr (kEarly) {
            // tc_pairs' pairs, addressed from two row pointers per thread (rows m0 + g and m0 + g + 8)
            // with the column steps as constant offsets: the per-pair 64-bit index arithmetic below
            // was ~20 % of version 5's instructions (Nsight Compute, session 32). Same values, same places.
            const int g = lane >> 2, t2 = 2 * (lane & 3);
#pragma unroll
            for (int e = 0; e < 4; e += 2) {
                const int r = m0 + g + 4 * e;
                if (r >= nc) continue;
                const int64_t row = row0 + r;
                uint16_t* const w = p.tcW + (row * Nv + h) * dk + n0 + t2;
                uint16_t* const u = p.tcU + (row * Nv + h) * dv + n0 + t2;
#pragma unroll
                for (int j = 0; j < NJ; ++j) {
                    const int cc = n0 + 8 * j + t2;
                    if (cc < dk) *reinterpret_cast<uint32_t*>(w + 8 * j) = Op::pack(aw[j][e], aw[j][e + 1]);
                    if (cc < dv) *reinterpret_cast<uint32_t*>(u + 8 * j) = Op::pack(au[j][e], au[j][e + 1]);
                }
            }
        } else {
            tc_pairs<NJ>(m0, n0, [&](int j, int e, int r, int cc) {
                if (r >= nc) return;
                const int64_t row = row0 + r;
                const int64_t ow = (row * Nv + h) * dk + cc, ou = (row * Nv + h) * dv + cc;
                if constexpr (X2) {
                    uint32_t hi, lo;
                    if (cc < dk) {
                        pack_split(aw[j][e], aw[j][e + 1], hi, lo);
                        *reinterpret_cast<uint32_t*>(p.tcW + ow) = hi;
                        *reinterpret_cast<uint32_t*>(p.tcWl + ow) = lo;
                    }
                    if (cc < dv) {
                        pack_split(au[j][e], au[j][e + 1], hi, lo);
                        *reinterpret_cast<uint32_t*>(p.tcU + ou) = hi;
                        *reinterpret_cast<uint32_t*>(p.tcUl + ou) = lo;
                    }
                } else {
                    if (cc < dk) *reinterpret_cast<uint32_t*>(p.tcW + ow) = Op::pack(aw[j][e], aw[j][e + 1]);
                    if (cc < dv) *reinterpret_cast<uint32_t*>(p.tcU + ou) = Op::pack(au[j][e], au[j][e + 1]);
                }
            });
        }
    }
}

template <int D, class Op, bool kEarly = false>
void launch_t(const RecArgs& a, cudaStream_t stream) {
    constexpr size_t smem = TcPrepSmem<D, Op::x2>::bytes;
    allow_dynamic_smem<gdn_tc_prep_kernel<D, Op, kEarly>>(smem);
    const dim3 grid(chunk_grid_blocks(a), unsigned(a.Nv));
    if (grid.x == 0) return;
    gdn_tc_prep_kernel<D, Op, kEarly><<<grid, kTcPrepThreads, smem, stream>>>(a);
    QS_CUDA_CHECK_LAUNCH();
}

}  // namespace

template <int D>
void launch_tc_prep(const RecArgs& a, TcOperands ops, cudaStream_t stream) {
    if (ops == TcOperands::kBf16x2) launch_t<D, TcBf16x2>(a, stream);
    else if (ops == TcOperands::kF16) launch_t<D, TcF16>(a, stream);
    else if (ops == TcOperands::kF16Early) launch_t<D, TcF16, true>(a, stream);
    else launch_t<D, TcBf16>(a, stream);
}

template void launch_tc_prep<32>(const RecArgs&, TcOperands, cudaStream_t);
template void launch_tc_prep<64>(const RecArgs&, TcOperands, cudaStream_t);
template void launch_tc_prep<128>(const RecArgs&, TcOperands, cudaStream_t);

}  // namespace qs::cuda::gdn

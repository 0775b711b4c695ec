// Gated DeltaNet, chunk-parallel path, step 1 of 2: the per-chunk WY precompute, every chunk of
// every chunked sequence at once (the state pass, gdn_cp_state.cu, then walks the chunks in order).
// CPU reference: src/backend/cpu/cpu_gdn.cpp; maths of the chunked form: gdn_chunked.cu.
//
// gdn_cp_prep_kernel<D, X3>: grid (chunk_grid_blocks, Nv) (block -> chunk: cp_chunk_of in
// gdn_common.cuh), 256 threads. Per chunk of nc <= 64 rows (rows >= nc zero) and value head h:
//   q̂, k̂ l2-normalised (q̂ also × 1/sqrt(Dk)); γ = cumsum(g) within the chunk;
//   L = strict_lower(β_r k̂_r·k̂_s e^{γr-γs});  T = (I + L)^-1;
//   W = T (k̂ β e^γ) -> cpW,  U = T (v β) -> the row's v in the conv workspace (only this block
//   reads that v), P = lower(q̂_r·k̂_s e^{γr-γs}) -> cpP, γ -> cpGam; the value heads with
//   h % (Nv/Nk) == 0 also write 1/||q|| · q_scale and 1/||k|| of their key head (cpRq, cpRk).
// Shared memory (floats): K̂ [64][D+8], V then Q̂ [64][D+8], L/T [64][68], scratch 768, 3 × 64
// vectors: D = 128: 90,880 bytes (2 blocks per SM). L, the inverse, the WY products and the q̂k̂ᵀ
// product are gdn_chunk_math.cuh's, shared with gdn_chunked.cu.
#include "backend/cuda/device_limits.h"
#include "backend/cuda/gdn_chunk_math.cuh"
#include "backend/cuda/gdn_common.cuh"

namespace qs::cuda::gdn {
namespace {

constexpr int kPrepThreads = 256;

template <int D>
struct PrepSmem {
    static constexpr int CT = 64;
    static constexpr int LDK = D + 8, LDX = D + 8, LDT = CT + 4;
    static constexpr int oK = 0;
    static constexpr int oX = oK + CT * LDK;
    static constexpr int oT = oX + CT * LDX;
    static constexpr int oScr = oT + CT * LDT;
    static constexpr int oVec = oScr + 768;  // beta, gam, fk = β e^γ
    static constexpr int floats = oVec + 3 * CT;
    static constexpr size_t bytes = size_t(floats) * sizeof(float);
};

// Rows [0, 64) of sX (pitch ld) scaled to unit l2 norm (times `scale`); the row factors are
// written to fac[r] (rows < nc) when fac is not null. One warp per row.
template <int D>
__device__ __forceinline__ void l2norm_rows(float* sX, int ld, float scale, float* fac, int nc) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll 1
    for (int r = warp; r < 64; r += kPrepThreads / 32) {
        float v[D / 32], ss = 0.f;
#pragma unroll
        for (int j = 0; j < D / 32; ++j) {
            v[j] = sX[r * ld + lane + 32 * j];
            ss = fmaf(v[j], v[j], ss);
        }
#pragma unroll
        for (int sh = 16; sh >= 1; sh >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, sh);
        const float f = scale / sqrtf(ss + 1e-6f);
#pragma unroll
        for (int j = 0; j < D / 32; ++j) sX[r * ld + lane + 32 * j] = v[j] * f;
        if (fac != nullptr && lane == 0 && r < nc) fac[r] = f;
    }
}

template <int D, bool X3>
__global__ void __launch_bounds__(kPrepThreads, 2) gdn_cp_prep_kernel(RecArgs p) {
    using L = PrepSmem<D>;
    constexpr int CT = 64, NT = kPrepThreads, D4 = D / 4;
    constexpr int LDK = L::LDK, LDX = L::LDX, LDT = L::LDT;
    static_assert(D % 32 == 0 && D <= 128, "D");

    GdnChunk ch;
    if (!cp_chunk_of(p, blockIdx.x, ch)) return;
    const int t0 = 64 * ch.chunk, nc = min(CT, ch.num_tokens - t0);
    const int64_t row0 = int64_t(ch.row_begin) + t0;

    extern __shared__ float4 smem4[];
    float* const sm = reinterpret_cast<float*>(smem4);
    float* const sK = sm + L::oK;
    float* const sX = sm + L::oX;
    float* const sT = sm + L::oT;
    float* const sScr = sm + L::oScr;
    float* const sBeta = sm + L::oVec;
    float* const sGam = sBeta + CT;
    float* const sFk = sGam + CT;

    const int h = blockIdx.y;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int g = lane >> 2, t4 = lane & 3;
    const int dk = p.Dk, dv = p.Dv, Nv = p.Nv, Nk = p.Nk;
    const int ratio = Nv / Nk, kh = h / ratio;
    const bool head_writer = (h % ratio) == 0;  // writes the key head's norms
    const int64_t C = p.C;
    const float A = expf(p.A_log[h]);
    const float dtb = p.dt_bias[h];

    // ---- raw k and v of the chunk (zero rows / columns beyond), gates.
#pragma unroll 4
    for (int idx = tid; idx < CT * D4; idx += NT) {
        const int r = idx / D4, cc = 4 * (idx % D4);
        const float* src = p.conv + (row0 + r) * C;
        const bool rv = r < nc;
        const float4 z4 = make_float4(0.f, 0.f, 0.f, 0.f);
        const float4 k4 = (rv && cc < dk) ? ld4(src + Nk * dk + kh * dk + cc) : z4;
        const float4 v4 = (rv && cc < dv) ? ld4(src + 2 * Nk * dk + h * dv + cc) : z4;
        *reinterpret_cast<float4*>(sK + r * LDK + cc) = k4;
        *reinterpret_cast<float4*>(sX + r * LDX + cc) = v4;
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

    // ---- k̂ rows; γ = cumsum(g) (warp 0, after its rows: the scan reads sGam of all 64 rows).
    l2norm_rows<D>(sK, LDK, 1.0f, sScr, nc);
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
        if (2 * lane < nc) p.cpGam[(row0 + 2 * lane) * Nv + h] = ga;
        if (2 * lane + 1 < nc) p.cpGam[(row0 + 2 * lane + 1) * Nv + h] = gb;
    }
    __syncthreads();
    // 1/||k|| (rows < nc) was left in the scratch, which the inverse reuses only after L's barrier.
    if (head_writer && tid < nc) p.cpRk[(row0 + tid) * Nk + kh] = sScr[tid];

    // Warp tiling of the 64-row products: m-tile mi (16 rows), half of the columns.
    const int mi = warp >> 1, half = warp & 1;
    const int m0 = 16 * mi;
    constexpr int NJD = D / 16;  // 8-column tiles per warp in 64 × D products
    const int nd0 = half * (D / 2);
    constexpr int NJC = 4;       // 8-column tiles per warp in 64 × 64 products
    const int nc0 = half * 32;

    // ---- L = strict_lower(β_r k̂_r·k̂_s e^{γr-γs}) into sT (all 64 × 64 entries written).
    chunk_lower_l<X3>(sT, LDT, sK, LDK, sBeta, sGam, m0, nc0, D);
    __syncthreads();

    // ---- T = (I + L)^-1 in place.
    invert_unit_lower64(sT, LDT, sScr);

    // ---- W = T (k̂ β e^γ) -> cpW, U = T (v β) -> the conv workspace's v (straight from registers).
    {
        float aw[NJD][4], au[NJD][4];
        chunk_wy<X3, NJD>(aw, au, sT, LDT, sK, LDK, sX, LDX, sFk, sBeta, m0, nd0);
#pragma unroll
        for (int j = 0; j < NJD; ++j)
#pragma unroll
            for (int e = 0; e < 4; e += 2) {
                const int r = m0 + g + 8 * (e >> 1), cc = nd0 + 8 * j + 2 * t4;
                if (r >= nc) continue;
                const int64_t row = row0 + r;
                if (cc < dk)
                    *reinterpret_cast<float2*>(p.cpW + (row * Nv + h) * dk + cc) = make_float2(aw[j][e], aw[j][e + 1]);
                if (cc < dv)
                    *reinterpret_cast<float2*>(p.conv_mut + row * C + 2 * Nk * dk + h * dv + cc) =
                        make_float2(au[j][e], au[j][e + 1]);
            }
    }
    __syncthreads();  // every warp is done reading V (sX) and T

    // ---- q̂ into sX; P = lower(q̂_r·k̂_s e^{γr-γs}) (diagonal included) -> cpP.
#pragma unroll 4
    for (int idx = tid; idx < CT * D4; idx += NT) {
        const int r = idx / D4, cc = 4 * (idx % D4);
        const float4 q4 = (r < nc && cc < dk) ? ld4(p.conv + (row0 + r) * C + kh * dk + cc) : make_float4(0.f, 0.f, 0.f, 0.f);
        *reinterpret_cast<float4*>(sX + r * LDX + cc) = q4;
    }
    __syncthreads();
    float* const sRq = sScr;  // the inverse is done with its scratch
    l2norm_rows<D>(sX, LDX, p.q_scale, sRq, nc);
    __syncthreads();
    if (head_writer && tid < nc) p.cpRq[(row0 + tid) * Nk + kh] = sRq[tid];
    {
        float acc[NJC][4];
        gram_lower<X3>(acc, sX, LDX, sK, LDK, m0, nc0, D);
#pragma unroll
        for (int j = 0; j < NJC; ++j)
#pragma unroll
            for (int e = 0; e < 4; e += 2) {
                const int r = m0 + g + 8 * (e >> 1), cc = nc0 + 8 * j + 2 * t4;
                if (r >= nc) continue;
                const float p0 = cc <= r ? acc[j][e] * expf(sGam[r] - sGam[cc]) : 0.f;
                const float p1 = cc + 1 <= r ? acc[j][e + 1] * expf(sGam[r] - sGam[cc + 1]) : 0.f;
                *reinterpret_cast<float2*>(p.cpP + ((row0 + r) * Nv + h) * 64 + cc) = make_float2(p0, p1);
            }
    }
}

}  // namespace

template <int D>
void launch_cp_prep(const RecArgs& a, bool x3, cudaStream_t stream) {
    constexpr size_t smem = PrepSmem<D>::bytes;
    const dim3 grid(chunk_grid_blocks(a), unsigned(a.Nv));
    if (grid.x == 0) return;
    if (x3) {
        allow_dynamic_smem<gdn_cp_prep_kernel<D, true>>(smem);
        gdn_cp_prep_kernel<D, true><<<grid, kPrepThreads, smem, stream>>>(a);
    } else {
        allow_dynamic_smem<gdn_cp_prep_kernel<D, false>>(smem);
        gdn_cp_prep_kernel<D, false><<<grid, kPrepThreads, smem, stream>>>(a);
    }
    QS_CUDA_CHECK_LAUNCH();
}

template void launch_cp_prep<32>(const RecArgs&, bool, cudaStream_t);
template void launch_cp_prep<64>(const RecArgs&, bool, cudaStream_t);
template void launch_cp_prep<128>(const RecArgs&, bool, cudaStream_t);

}  // namespace qs::cuda::gdn

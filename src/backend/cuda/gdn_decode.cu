// Gated DeltaNet, step 2b: the token-serial recurrence split over value columns (the default for
// decode-only batches; gdn_kernels.h, GatedDeltaNetParams::decode_split). CPU reference:
// src/backend/cpu/cpu_gdn.cpp. Same maths and association as gdn_serial.cu, which it replaces for
// those batches: for one token the value columns of the state are independent,
//   S[:, j] ← decay·S[:, j] + k̂ δ_j,  δ_j = β (v_j − decay·(S[:, j]·k̂)),  o_j = S_new[:, j]·q̂,
// so a (sequence, value head) is served by ceil(Dv / 32) blocks of 32 columns each.
//
// Kernel 2b, gdn_split_kernel<D, BF16, NT>: grid (Nv · ceil(Dv/32), num_seqs), NT = 64 or 128
//   threads; block = 32 value columns [c0, c0 + 32) of one (sequence, value head), skipped when the
//   sequence goes to the chunked kernel. Its state slice [Dk, 32] lives in registers for the whole
//   call: thread (ty = tid / 4, tx = tid % 4) holds rows ty + NY·i (NY = NT/4 row groups,
//   i < D/NY), columns c0 + 8tx .. +7 (one 16-byte streaming load per row for bf16 when
//   Dv % 8 == 0, else two 8-byte ones; two 16-byte ones for fp32). D = 128 is 8 KB of bf16 state
//   per block against 32 KB in gdn_serial.cu: 4x the blocks, 4 (NT 128) or 6 (NT 64) per SM
//   against 2, so the load, compute and store phases of different blocks overlap. Per token: q, k (all Dk), v and z (the block's columns) staged in
//   shared memory (double-buffered, next token prefetched into registers); Sᵀk, Sᵀq partials
//   reduced over the warp's 8 row groups by shuffles, then over the warps through shared memory
//   (two barriers per token); every thread then holds δ, o for its 8 columns and updates its rows.
//   Output: with one slice per head (Dv <= 32) the block applies the gated RMSNorm itself;
//   otherwise it writes o un-normalised and the next kernel normalises the rows:
// Kernel 2b', gdn_split_norm_kernel: grid (num_seqs), 256 threads, one warp per (row, value head)
//   of the sequences the split kernel served: out = norm_w · o / sqrt(mean(o²) + eps) · silu(z),
//   in place (the row's Dv outputs come from several blocks).
// defer_state (MTP verification) is honoured as in gdn_serial.cu: the state is read, not written.
#include "backend/cuda/gdn_common.cuh"

namespace qs::cuda::gdn {
namespace {

constexpr int kSplitCols = 32;  // value columns per block
constexpr int kSplitNormThreads = 256;

__device__ __forceinline__ float4 zero4() { return make_float4(0.f, 0.f, 0.f, 0.f); }

__device__ __forceinline__ float4 bf16x4_to_float4(uint32_t a, uint32_t b) {
    const float2 lo = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&a));
    const float2 hi = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&b));
    return make_float4(lo.x, lo.y, hi.x, hi.y);
}
__device__ __forceinline__ uint32_t float2_to_bf16x2(float a, float b) {
    const __nv_bfloat162 v = __floats2bfloat162_rn(a, b);
    return *reinterpret_cast<const uint32_t*>(&v);
}

// Columns col..col+7 of one state row at element index idx; nvc = dv - col valid columns (>= 8:
// all, 4: the first half, <= 0: none; Dv and col are multiples of 4). vec16: one 16-byte access
// for 8 bf16 values (needs idx % 8 == 0, i.e. Dv % 8 == 0).
template <bool BF16>
__device__ __forceinline__ void load8(const void* base, int64_t idx, int nvc, bool vec16, float (&x)[8]) {
    float4 lo = zero4(), hi = zero4();
    if (BF16 && vec16 && nvc >= 8) {
        const uint4 u = __ldcs(reinterpret_cast<const uint4*>(static_cast<const __nv_bfloat16*>(base) + idx));
        lo = bf16x4_to_float4(u.x, u.y);
        hi = bf16x4_to_float4(u.z, u.w);
    } else {
        if (nvc >= 4) lo = StateIO<BF16>::load(base, idx);
        if (nvc >= 8) hi = StateIO<BF16>::load(base, idx + 4);
    }
    x[0] = lo.x; x[1] = lo.y; x[2] = lo.z; x[3] = lo.w;
    x[4] = hi.x; x[5] = hi.y; x[6] = hi.z; x[7] = hi.w;
}

template <bool BF16>
__device__ __forceinline__ void store8(void* base, int64_t idx, int nvc, bool vec16, const float (&x)[8]) {
    if (BF16 && vec16 && nvc >= 8) {
        uint4 u;
        u.x = float2_to_bf16x2(x[0], x[1]);
        u.y = float2_to_bf16x2(x[2], x[3]);
        u.z = float2_to_bf16x2(x[4], x[5]);
        u.w = float2_to_bf16x2(x[6], x[7]);
        __stcs(reinterpret_cast<uint4*>(static_cast<__nv_bfloat16*>(base) + idx), u);
        return;
    }
    if (nvc >= 4) StateIO<BF16>::store(base, idx, make_float4(x[0], x[1], x[2], x[3]));
    if (nvc >= 8) StateIO<BF16>::store(base, idx + 4, make_float4(x[4], x[5], x[6], x[7]));
}

// NT = 128: 4 blocks per SM (128 registers); NT = 64: twice the rows per thread, 6 blocks per SM
// (168 registers), 1.5x the state bytes in flight per SM.
template <int D, bool BF16, int NT>
__global__ void __launch_bounds__(NT, NT == 64 ? 6 : 4) gdn_split_kernel(RecArgs p, int nslices) {
    constexpr int CB = kSplitCols;
    constexpr int TX = CB / 8;               // threads across the slice (8 columns each)
    constexpr int NY = NT / TX;              // row groups
    constexpr int RK = D / NY;               // rows per thread
    constexpr int NWARP = NT / 32;
    constexpr int NIN = 2 * D + 2 * CB;      // staged per token: q[D] | k[D] | v[CB] | z[CB]
    constexpr int PF = (NIN + NT - 1) / NT;  // staged elements per thread per token
    static_assert(RK >= 1 && RK * NY == D && NY % 8 == 0 && TX == 4, "bad tile");

    const DeviceSeq sq = p.seqs[blockIdx.y];
    const int n = sq.num_tokens;
    if (n <= 0 || (p.chunk_min_tokens > 0 && n >= p.chunk_min_tokens)) return;

    const int h = int(blockIdx.x) / nslices, slice = int(blockIdx.x) % nslices;
    const int tid = threadIdx.x, tx = tid % TX, ty = tid / TX, lane = tid & 31, warp = tid >> 5;
    const int dk = p.Dk, dv = p.Dv, Nv = p.Nv;
    const int kh = h / (Nv / p.Nk);
    const int c0 = CB * slice;
    const int col = c0 + 8 * tx;  // this thread's first column
    const int nvc = dv - col;     // its valid columns: >= 8 all, 4 half, <= 0 none
    const bool fused_norm = nslices == 1;
    const bool vec16 = (dv & 7) == 0;

    __shared__ float s_in[2][NIN];
    __shared__ float s_red[NWARP][TX][16];  // per warp and column group: Sᵀk (8) | Sᵀq (8)

    // State slice into registers (issued first: the largest stream).
    const int64_t sbase = (int64_t(sq.state_slot) * Nv + h) * dk * dv;
    float S[RK][8];
#pragma unroll
    for (int i = 0; i < RK; ++i) {
        const int row = ty + NY * i;
        load8<BF16>(p.state, sbase + int64_t(row) * dv + col, row < dk ? nvc : 0, vec16, S[i]);
    }

    const int64_t C = p.C, ZW = int64_t(Nv) * dv;
    const float A = expf(p.A_log[h]);
    const float dtb = p.dt_bias[h];

    // Staging: element e = tid + NT*j of [q | k | v slice | z slice] is a column of the token's
    // conv row or (fused norm only) z row, or zero beyond Dk / Dv; every slot is written each token.
    // The source is recomputed per fetch (cheaper than keeping PF indices in registers).
    float pf[PF], pb, pa;
    auto fetch = [&](int i) {
        const int64_t row = sq.row_begin + i;
        const float* crow = p.conv + row * C;
#pragma unroll
        for (int j = 0; j < PF; ++j) {
            const int e = tid + NT * j;
            float x = 0.f;
            if (e < D) {
                if (e < dk) x = crow[kh * dk + e];
            } else if (e < 2 * D) {
                if (e - D < dk) x = crow[p.Nk * dk + kh * dk + (e - D)];
            } else if (e < 2 * D + CB) {
                const int c = c0 + (e - 2 * D);
                if (c < dv) x = crow[2 * p.Nk * dk + h * dv + c];
            } else if (e < NIN) {
                const int c = c0 + (e - 2 * D - CB);
                if (c < dv && fused_norm) x = p.z[row * ZW + h * dv + c];
            }
            pf[j] = x;
        }
        pb = p.b[row * Nv + h];
        pa = p.a[row * Nv + h];
    };
    fetch(0);

    for (int i = 0; i < n; ++i) {
        float* sin = s_in[i & 1];
#pragma unroll
        for (int j = 0; j < PF; ++j)
            if (tid + NT * j < NIN) sin[tid + NT * j] = pf[j];
        const float bcur = pb, acur = pa;
        if (i + 1 < n) fetch(i + 1);
        __syncthreads();  // (S1) inputs of token i staged

        const float* q = sin;
        const float* k = sin + D;
        // Norms and q·k (raw), every warp redundantly.
        float qq = 0.f, kk = 0.f, qk = 0.f;
#pragma unroll
        for (int e = lane; e < D; e += 32) {
            const float qv = q[e], kv = k[e];
            qq = fmaf(qv, qv, qq);
            kk = fmaf(kv, kv, kk);
            qk = fmaf(qv, kv, qk);
        }
#pragma unroll
        for (int sh = 16; sh >= 1; sh >>= 1) {
            qq += __shfl_xor_sync(0xffffffffu, qq, sh);
            kk += __shfl_xor_sync(0xffffffffu, kk, sh);
            qk += __shfl_xor_sync(0xffffffffu, qk, sh);
        }
        // Partial Sᵀk, Sᵀq over this thread's rows, then over the warp's row groups (lanes with
        // the same tx: xor 4, 8, 16).
        float pk[8], pq[8];
#pragma unroll
        for (int c = 0; c < 8; ++c) { pk[c] = 0.f; pq[c] = 0.f; }
#pragma unroll
        for (int r = 0; r < RK; ++r) {
            const int row = ty + NY * r;
            const float kr = k[row], qr = q[row];
#pragma unroll
            for (int c = 0; c < 8; ++c) {
                pk[c] = fmaf(S[r][c], kr, pk[c]);
                pq[c] = fmaf(S[r][c], qr, pq[c]);
            }
        }
#pragma unroll
        for (int sh = TX; sh < 32; sh <<= 1)
#pragma unroll
            for (int c = 0; c < 8; ++c) {
                pk[c] += __shfl_xor_sync(0xffffffffu, pk[c], sh);
                pq[c] += __shfl_xor_sync(0xffffffffu, pq[c], sh);
            }
        if (lane < TX) {
#pragma unroll
            for (int c = 0; c < 8; ++c) {
                s_red[warp][lane][c] = pk[c];
                s_red[warp][lane][8 + c] = pq[c];
            }
        }
        __syncthreads();  // (S2) partials visible

        float mk[8], mq[8];
#pragma unroll
        for (int c = 0; c < 8; ++c) { mk[c] = 0.f; mq[c] = 0.f; }
#pragma unroll
        for (int w = 0; w < NWARP; ++w)
#pragma unroll
            for (int c = 0; c < 8; ++c) {
                mk[c] += s_red[w][tx][c];
                mq[c] += s_red[w][tx][8 + c];
            }
        const float rk = 1.0f / sqrtf(kk + 1e-6f);
        const float rq = p.q_scale / sqrtf(qq + 1e-6f);
        const float beta = sigmoid_f(bcur);
        const float decay = expf(-A * softplus_f(acur + dtb));
        const float dm = decay * rk, dq = decay * rq, qkn = qk * rk * rq;
        const float* v = sin + 2 * D + 8 * tx;
        float dl[8], o[8];
#pragma unroll
        for (int c = 0; c < 8; ++c) {
            dl[c] = beta * (v[c] - dm * mk[c]);
            o[c] = fmaf(dq, mq[c], qkn * dl[c]);
        }
#pragma unroll
        for (int r = 0; r < RK; ++r) {
            const float kr = k[ty + NY * r] * rk;
#pragma unroll
            for (int c = 0; c < 8; ++c) S[r][c] = fmaf(decay, S[r][c], kr * dl[c]);
        }
        // Output: the row group ty == 0 (lanes 0..3 of warp 0) writes the slice's 32 columns.
        float* orow = p.out + (int64_t(sq.row_begin) + i) * ZW + int64_t(h) * dv + col;
        if (fused_norm) {  // the slice is the whole head: gated RMSNorm here (columns beyond Dv are 0)
            float ss = 0.f;
#pragma unroll
            for (int c = 0; c < 8; ++c) ss = fmaf(o[c], o[c], ss);
            ss += __shfl_xor_sync(0xffffffffu, ss, 1);
            ss += __shfl_xor_sync(0xffffffffu, ss, 2);
            const float inv = 1.0f / sqrtf(ss / float(dv) + p.eps);
            const float* z = sin + 2 * D + CB + 8 * tx;
            if (ty == 0 && nvc > 0) {
                float y[8];
#pragma unroll
                for (int c = 0; c < 8; ++c) y[c] = p.norm_w[col + (c < nvc ? c : 0)] * (o[c] * inv) * silu_f(z[c]);
                st4(orow, make_float4(y[0], y[1], y[2], y[3]));
                if (nvc >= 8) st4(orow + 4, make_float4(y[4], y[5], y[6], y[7]));
            }
        } else if (ty == 0 && nvc > 0) {
            st4(orow, make_float4(o[0], o[1], o[2], o[3]));
            if (nvc >= 8) st4(orow + 4, make_float4(o[4], o[5], o[6], o[7]));
        }
    }

    if (sq.defer_state) return;  // MTP verification: the state stays (gdn_commit advances it)
#pragma unroll
    for (int i = 0; i < RK; ++i) {
        const int row = ty + NY * i;
        if (row < dk) store8<BF16>(p.state, sbase + int64_t(row) * dv + col, nvc, vec16, S[i]);
    }
}

// The gated RMSNorm of the rows the split kernel wrote un-normalised (more than one slice per head).
__global__ void __launch_bounds__(kSplitNormThreads) gdn_split_norm_kernel(RecArgs p) {
    constexpr int NWARP = kSplitNormThreads / 32;
    const DeviceSeq sq = p.seqs[blockIdx.x];
    const int n = sq.num_tokens;
    if (n <= 0 || (p.chunk_min_tokens > 0 && n >= p.chunk_min_tokens)) return;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int dv = p.Dv, Nv = p.Nv, e = 4 * lane;
    const bool on = e < dv;
    const float4 nw = on ? ld4(p.norm_w + e) : zero4();
    for (int w = warp; w < n * Nv; w += NWARP) {
        const int64_t row = int64_t(sq.row_begin) + w / Nv;
        const int h = w % Nv;
        const int64_t off = row * Nv * dv + int64_t(h) * dv + e;
        const float4 o = on ? ld4(p.out + off) : zero4();
        float ss = o.x * o.x + o.y * o.y + o.z * o.z + o.w * o.w;
#pragma unroll
        for (int sh = 16; sh >= 1; sh >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, sh);
        if (!on) continue;
        const float inv = 1.0f / sqrtf(ss / float(dv) + p.eps);
        const float4 z = ld4(p.z + off);
        st4(p.out + off, make_float4(nw.x * (o.x * inv) * silu_f(z.x), nw.y * (o.y * inv) * silu_f(z.y),
                                     nw.z * (o.z * inv) * silu_f(z.z), nw.w * (o.w * inv) * silu_f(z.w)));
    }
}

}  // namespace

template <int D>
void launch_split(const RecArgs& a, bool bf16, int threads, int num_seqs, cudaStream_t stream) {
    const int nslices = (a.Dv + kSplitCols - 1) / kSplitCols;
    const dim3 grid(unsigned(a.Nv * nslices), unsigned(num_seqs));
    if (threads == 64) {
        if (bf16) gdn_split_kernel<D, true, 64><<<grid, 64, 0, stream>>>(a, nslices);
        else gdn_split_kernel<D, false, 64><<<grid, 64, 0, stream>>>(a, nslices);
    } else {
        if (bf16) gdn_split_kernel<D, true, 128><<<grid, 128, 0, stream>>>(a, nslices);
        else gdn_split_kernel<D, false, 128><<<grid, 128, 0, stream>>>(a, nslices);
    }
    QS_CUDA_CHECK_LAUNCH();
    if (nslices > 1) {
        gdn_split_norm_kernel<<<unsigned(num_seqs), kSplitNormThreads, 0, stream>>>(a);
        QS_CUDA_CHECK_LAUNCH();
    }
}

template void launch_split<32>(const RecArgs&, bool, int, int, cudaStream_t);
template void launch_split<64>(const RecArgs&, bool, int, int, cudaStream_t);
template void launch_split<128>(const RecArgs&, bool, int, int, cudaStream_t);

}  // namespace qs::cuda::gdn

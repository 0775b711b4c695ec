// Gated DeltaNet, step 2a: the token-serial recurrence (decode and sequences shorter than
// chunk_min_tokens), launched by launch_gdn_recurrence (gdn_kernels.cu). CPU reference:
// src/backend/cpu/cpu_gdn.cpp.
//
// Kernel 2a, gdn_serial_kernel<D, BF16>: grid (Nv, num_seqs), 256 threads; block = one
//   (sequence, value head), skipped when the sequence goes to the chunked kernel. Beside the chunk
//   kernels and the warp slices, grid (Nv, listed) over RecArgs::short_seqs instead (gdn_kernels.cu). State tile
//   [Dk, Dv] lives in registers for the whole call: thread (wy = tid / (D/4), tx = tid % (D/4))
//   holds rows wy + NW·i (i < D/NW), columns 4tx..4tx+3 (float4 / 4×bf16 accesses, a warp
//   covers whole rows: coalesced). Per token, with one read of S:
//     mk = Sᵀk, mq = Sᵀq (raw q, k; reduced over rows through shared memory),
//     δ = β (v − decay·r_k·mk),  o = decay·r_q·mq + (q̂·k̂) δ,  S ← decay·S + k̂ δᵀ
//   (o = S_newᵀ q̂ expanded), which is the reference's update in a different association.
//   Inputs of token i+1 are prefetched into registers while token i computes; two barriers
#include "backend/cuda/gdn_common.cuh"

namespace qs::cuda::gdn {
namespace {

constexpr int kSerialThreads = 256;

template <int D, bool BF16>
__global__ void __launch_bounds__(kSerialThreads, 2) gdn_serial_kernel(RecArgs p) {
    constexpr int NT = kSerialThreads;
    constexpr int TX = D / 4;        // threads across a row (4 columns each)
    constexpr int NW = NT / TX;      // row groups
    constexpr int RK = D / NW;       // rows per thread
    constexpr int PF = (4 * D + NT - 1) / NT;  // staged input elements per thread per token
    static_assert(TX <= 32 && (32 % TX) == 0 && NW * TX == NT && RK * NW == D, "bad tile");

    const DeviceSeq sq = p.seqs[serial_seq_of(p, blockIdx.y)];
    const int n = sq.num_tokens;
    if (n <= 0 || (p.chunk_min_tokens > 0 && n >= p.chunk_min_tokens) || (n == 1 && p.skip_single)) return;

    const int h = blockIdx.x;
    const int tid = threadIdx.x, tx = tid % TX, wy = tid / TX, lane = tid & 31;
    const int dk = p.Dk, dv = p.Dv, Nv = p.Nv;
    const int kh = h / (Nv / p.Nk);
    const int col = 4 * tx;
    const bool col_ok = col < dv;

    __shared__ float s_in[2][4 * D];          // per buffer: q[D] | k[D] | v[D] | z[D] (raw)
    __shared__ float4 s_redk[NW][TX];
    __shared__ float4 s_redq[NW][TX];

    // State tile into registers (issued first: the largest stream).
    const int64_t sbase = (int64_t(sq.state_slot) * Nv + h) * dk * dv;
    float4 S[RK];
#pragma unroll
    for (int i = 0; i < RK; ++i) {
        const int row = wy + NW * i;
        S[i] = (row < dk && col_ok) ? StateIO<BF16>::load(p.state, sbase + int64_t(row) * dv + col)
                                    : make_float4(0.f, 0.f, 0.f, 0.f);
    }

    // Zero the tails of the staging buffers (never written by the staging below).
    for (int e = tid; e < D; e += NT) {
        if (e >= dk) {
            s_in[0][e] = 0.f; s_in[1][e] = 0.f; s_in[0][D + e] = 0.f; s_in[1][D + e] = 0.f;
        }
        if (e >= dv) {
            s_in[0][2 * D + e] = 0.f; s_in[1][2 * D + e] = 0.f; s_in[0][3 * D + e] = 0.f; s_in[1][3 * D + e] = 0.f;
        }
    }

    // Staging map: element e = tid + NT*j of [q(dk) | k(dk) | v(dv) | z(dv)]: source column off[j]
    // of a conv row (or of a z row when off[j] < 0, stored as ~column), smem slot dst[j] (-1: none).
    int off[PF], dst[PF];
#pragma unroll
    for (int j = 0; j < PF; ++j) {
        const int e = tid + NT * j;
        off[j] = 0; dst[j] = -1;
        if (e < dk) {
            off[j] = kh * dk + e; dst[j] = e;
        } else if (e < 2 * dk) {
            off[j] = p.Nk * dk + kh * dk + (e - dk); dst[j] = D + (e - dk);
        } else if (e < 2 * dk + dv) {
            off[j] = 2 * p.Nk * dk + h * dv + (e - 2 * dk); dst[j] = 2 * D + (e - 2 * dk);
        } else if (e < 2 * dk + 2 * dv) {
            off[j] = ~(h * dv + (e - 2 * dk - dv)); dst[j] = 3 * D + (e - 2 * dk - dv);
        }
    }
    const int64_t C = p.C, ZW = int64_t(Nv) * dv;

    const float A = expf(p.A_log[h]);
    const float dtb = p.dt_bias[h];
    const float4 nw = col_ok ? ld4(p.norm_w + col) : make_float4(0.f, 0.f, 0.f, 0.f);

    float pf[PF], pb, pa;
    auto fetch = [&](int i) {
        const int64_t row = sq.row_begin + i;
#pragma unroll
        for (int j = 0; j < PF; ++j)
            pf[j] = dst[j] < 0 ? 0.f : off[j] >= 0 ? p.conv[row * C + off[j]] : p.z[row * ZW + ~off[j]];
        pb = p.b[row * Nv + h];
        pa = p.a[row * Nv + h];
    };
    fetch(0);

    for (int i = 0; i < n; ++i) {
        const int buf = i & 1;
        float* sin = s_in[buf];
#pragma unroll
        for (int j = 0; j < PF; ++j)
            if (dst[j] >= 0) sin[dst[j]] = pf[j];
        const float bcur = pb, acur = pa;
        if (i + 1 < n) fetch(i + 1);
        __syncthreads();  // (S1) inputs of token i staged

        const float* q = sin;
        const float* k = sin + D;
        // Norms and q·k (raw), every warp redundantly (no extra barrier).
        const QkNorms nr = qk_norms_warp<D>(q, k, lane);
        const float qq = nr.qq, kk = nr.kk, qk = nr.qk;
        // Partial Sᵀk, Sᵀq over this thread's rows.
        float4 pk = make_float4(0.f, 0.f, 0.f, 0.f), pq = pk;
#pragma unroll
        for (int r = 0; r < RK; ++r) {
            const int row = wy + NW * r;
            const float kr = k[row], qr = q[row];
            pk.x = fmaf(S[r].x, kr, pk.x); pk.y = fmaf(S[r].y, kr, pk.y);
            pk.z = fmaf(S[r].z, kr, pk.z); pk.w = fmaf(S[r].w, kr, pk.w);
            pq.x = fmaf(S[r].x, qr, pq.x); pq.y = fmaf(S[r].y, qr, pq.y);
            pq.z = fmaf(S[r].z, qr, pq.z); pq.w = fmaf(S[r].w, qr, pq.w);
        }
        s_redk[wy][tx] = pk;
        s_redq[wy][tx] = pq;
        __syncthreads();  // (S2) partials visible

        float4 mk = make_float4(0.f, 0.f, 0.f, 0.f), mq = mk;
#pragma unroll
        for (int w2 = 0; w2 < NW; ++w2) {
            const float4 a4 = s_redk[w2][tx], b4 = s_redq[w2][tx];
            mk.x += a4.x; mk.y += a4.y; mk.z += a4.z; mk.w += a4.w;
            mq.x += b4.x; mq.y += b4.y; mq.z += b4.z; mq.w += b4.w;
        }
        const float rk = 1.0f / sqrtf(kk + 1e-6f);
        const float rq = p.q_scale / sqrtf(qq + 1e-6f);
        const float beta = sigmoid_f(bcur);
        const float decay = expf(-A * softplus_f(acur + dtb));
        const float4 v4 = *reinterpret_cast<const float4*>(sin + 2 * D + col);
        const float dm = decay * rk;
        float4 dl;
        dl.x = beta * (v4.x - dm * mk.x);
        dl.y = beta * (v4.y - dm * mk.y);
        dl.z = beta * (v4.z - dm * mk.z);
        dl.w = beta * (v4.w - dm * mk.w);
        const float dq = decay * rq, qkn = qk * rk * rq;
        float4 o;
        o.x = fmaf(dq, mq.x, qkn * dl.x);
        o.y = fmaf(dq, mq.y, qkn * dl.y);
        o.z = fmaf(dq, mq.z, qkn * dl.z);
        o.w = fmaf(dq, mq.w, qkn * dl.w);
#pragma unroll
        for (int r = 0; r < RK; ++r) {
            const float kr = k[wy + NW * r] * rk;
            S[r].x = fmaf(decay, S[r].x, kr * dl.x);
            S[r].y = fmaf(decay, S[r].y, kr * dl.y);
            S[r].z = fmaf(decay, S[r].z, kr * dl.z);
            S[r].w = fmaf(decay, S[r].w, kr * dl.w);
        }
        if (i == 0 && sq.defer_state) {  // MTP verification: the state after the kept first row
#pragma unroll
            for (int r = 0; r < RK; ++r) {
                const int row = wy + NW * r;
                if (row < dk && col_ok) StateIO<BF16>::store(p.state, sbase + int64_t(row) * dv + col, S[r]);
            }
        }
        // Gated RMSNorm over the head's Dv outputs (one row group's TX lanes hold all columns).
        float ss = o.x * o.x + o.y * o.y + o.z * o.z + o.w * o.w;
#pragma unroll
        for (int sh = TX / 2; sh >= 1; sh >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, sh);
        if (wy == 0 && col_ok) {
            const float inv = 1.0f / sqrtf(ss / float(dv) + p.eps);
            const float4 z4 = *reinterpret_cast<const float4*>(sin + 3 * D + col);
            float4 y;
            y.x = nw.x * (o.x * inv) * silu_f(z4.x);
            y.y = nw.y * (o.y * inv) * silu_f(z4.y);
            y.z = nw.z * (o.z * inv) * silu_f(z4.z);
            y.w = nw.w * (o.w * inv) * silu_f(z4.w);
            st4(p.out + (int64_t(sq.row_begin) + i) * ZW + int64_t(h) * dv + col, y);
        }
    }

    // MTP verification: rows 1.. are gdn_commit's (accepted drafts), or, with a spare slot, the
    // state after the last row goes there (taken on a full acceptance); the slot keeps row 0's.
    if (sq.defer_state && sq.spare_slot < 0) return;
    const int64_t obase = sq.defer_state ? (int64_t(sq.spare_slot) * Nv + h) * dk * dv : sbase;
#pragma unroll
    for (int i = 0; i < RK; ++i) {
        const int row = wy + NW * i;
        if (row < dk && col_ok) StateIO<BF16>::store(p.state, obase + int64_t(row) * dv + col, S[i]);
    }
}

}  // namespace

template <int D>
void launch_serial(const RecArgs& a, bool bf16, int num_seqs, cudaStream_t stream) {
    const dim3 grid(a.Nv, num_seqs);
    if (bf16)
        gdn_serial_kernel<D, true><<<grid, kSerialThreads, 0, stream>>>(a);
    else
        gdn_serial_kernel<D, false><<<grid, kSerialThreads, 0, stream>>>(a);
    QS_CUDA_CHECK_LAUNCH();
}

template void launch_serial<32>(const RecArgs&, bool, int, cudaStream_t);
template void launch_serial<64>(const RecArgs&, bool, int, cudaStream_t);
template void launch_serial<128>(const RecArgs&, bool, int, cudaStream_t);

}  // namespace qs::cuda::gdn

// Gated DeltaNet, step 2b: the token-serial recurrence with the states streamed through shared
// memory (decode-only batches by default; gdn_kernels.h, GatedDeltaNetParams::decode_kernel).
// CPU reference: src/backend/cpu/cpu_gdn.cpp. Same maths and association as gdn_serial.cu:
//   mk = Sᵀk, mq = Sᵀq (raw q, k),  δ = β (v − decay·r_k·mk),  o = decay·r_q·mq + (q̂·k̂) δ,
//   S ← decay·S + k̂ δᵀ,  out = gated RMSNorm(o).
// gdn_serial.cu holds one (sequence, value head) state per block in registers and loads it, computes
// and stores it in three phases; with bf16 state its two blocks per SM have only 64 KB of loads in
// flight, and only while both are in the load phase (52 % of copy bandwidth measured at 256
// sequences). Here the loads run ahead of the compute:
//
// Kernel 2b, gdn_stream_kernel<D, BF16>: `blocks` persistent blocks (2 per SM by default) of NT = 256
//   threads (128 at D = 32); block b serves the items (sequence s, value head h) = item / Nv, item % Nv
//   for item = b, b + blocks, ... Each item's state [Dk, Dv] (contiguous in the slot: one flat copy),
//   its first token's q, k, v, z rows and b, a are copied by cp.async into one of NS shared-memory
//   stages (NS = 2 for D = 128 bf16 state, 1 for D = 128 fp32, up to 4 for smaller heads: as many
//   as fit two blocks per SM), NS items ahead of the one being computed. Per item: wait for its
//   stage, copy the state into registers (thread (wy = tid / TX, tx = tid % TX), TX = D/8, holds rows
//   wy + NW·i, columns 8tx..8tx+7: one 16-byte shared read per row for bf16) and the token inputs
//   into the token buffer, barrier, refill the stage with the item NS ahead, then compute the tokens
//   from registers (later tokens' inputs prefetched into registers one token ahead, as in
//   gdn_serial.cu): Sᵀk, Sᵀq partials reduced by shuffles within the warp, over the warps through
//   shared memory (one sum per column by one thread), δ, o, the update, the gated RMSNorm by the
//   first row group (it holds all Dv columns); finally the state is stored from registers (16-byte
//   streaming stores for bf16 when Dv % 8 == 0). Sequences that are not served (0 tokens, or
//   chunk_min_tokens or more: the chunked kernel's) copy nothing. defer_state (MTP verification):
//   the state after the first token (always kept) is stored, the later tokens' is not (or, with
//   a spare slot, the state after the last token goes into the spare slot). Item descriptors are read one item ahead of their copy, so the copy issue
//   never waits for the descriptor.
//
// Version 2 (VER, GatedDeltaNetParams::decode_version; see the comment at the kernel): the item's
// A_log, dt_bias come with its stage and norm_w sits in shared memory, so no global load is left
// on a single-token item's path; one token-input buffer and the column sums in place free the room
// for a third stage at D = 128 bf16. Bit-identical to version 1.
//
// The v3 kernel that split a head over 32-column blocks (measured slower than gdn_serial.cu on the
// H200: bench/kernels/NOTES.md, GDN v3 measured) was replaced by this one.
#include "backend/cuda/device_limits.h"
#include "backend/cuda/gdn_common.cuh"
#include "backend/cuda/ptx_helpers.cuh"

namespace qs::cuda::gdn {
namespace {

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

// Tile and shared-memory plan of gdn_stream_kernel<D, BF16, VER>.
template <int D, bool BF16, int VER = 1>
struct StreamTile {
    static constexpr int NT = D >= 64 ? 256 : 128;  // threads
    static constexpr int TX = D / 8;                 // threads across a row (8 columns each)
    static constexpr int NW = NT / TX;               // row groups
    static constexpr int RK = D / NW;                // rows per thread
    static constexpr int NWARP = NT / 32;
    static constexpr int PF = 4 * D / NT;            // token inputs (q | k | v | z) per thread
    static constexpr int ESZ = BF16 ? 2 : 4;
    // A stage: the state (flat [Dk, Dv], row stride Dv), then q | k | v | z of the first token
    // (D floats each), then b, a (version 2: b, a, A_log, dt_bias of the head; 16 bytes).
    static constexpr int kInOff = D * D * ESZ;
    static constexpr int kAbOff = kInOff + 16 * D;
    static constexpr int kStageBytes = kAbOff + 16;
    // Two blocks per SM: 227 KB of shared memory per SM, less 1 KB per block, less the static arrays.
    // Version 2: one token-input buffer (s_in), the column sums in place in s_red (no s_m), s_nw
    // (norm_w, D floats), s_hdr for up to 4 stages (80 bytes); its budget is the SM's exact 228 KB
    // (233,472 bytes) over two blocks, less 1 KB reserved per block: at D = 128 bf16 that makes
    // room for a third stage (3 × 34,832 + 10,832 <= 115,712).
    static constexpr int kStaticBytes = VER == 2 ? (4 * D + NWARP * 2 * D + D) * 4 + 96
                                                 : (8 * D + NWARP * 2 * D + 2 * D) * 4 + 64;
    static constexpr int kBudget = (VER == 2 ? 233472 / 2 : (227 * 1024) / 2) - 1024 - kStaticBytes;
    static constexpr int kFit = kBudget / kStageBytes;
    static constexpr int NS = kFit > 4 ? 4 : kFit < 1 ? 1 : kFit;  // stages
    static constexpr int kSmemBytes = NS * kStageBytes;
    static_assert(TX <= 32 && 32 % TX == 0 && NW * TX == NT && RK * NW == D && PF * NT == 4 * D, "bad tile");
    static_assert(kFit >= 1, "one stage does not fit two blocks per SM");
};

// Columns col..col+7 of one state row from a stage (element index idx); nvc = Dv − col valid
// columns (>= 8 all, 4 the first half, <= 0 none). vec16: one 16-byte read for bf16 (Dv % 8 == 0).
template <bool BF16>
__device__ __forceinline__ void stage_read8(const uint8_t* st, int idx, int nvc, bool vec16, float (&x)[8]) {
    float4 lo = zero4(), hi = zero4();
    if constexpr (BF16) {
        const __nv_bfloat16* b = reinterpret_cast<const __nv_bfloat16*>(st) + idx;
        if (vec16 && nvc >= 8) {
            const uint4 u = *reinterpret_cast<const uint4*>(b);
            lo = bf16x4_to_float4(u.x, u.y);
            hi = bf16x4_to_float4(u.z, u.w);
        } else {
            if (nvc >= 4) {
                const uint2 u = *reinterpret_cast<const uint2*>(b);
                lo = bf16x4_to_float4(u.x, u.y);
            }
            if (nvc >= 8) {
                const uint2 u = *reinterpret_cast<const uint2*>(b + 4);
                hi = bf16x4_to_float4(u.x, u.y);
            }
        }
    } else {
        const float* f = reinterpret_cast<const float*>(st) + idx;
        if (nvc >= 4) lo = ld4(f);
        if (nvc >= 8) hi = ld4(f + 4);
    }
    x[0] = lo.x; x[1] = lo.y; x[2] = lo.z; x[3] = lo.w;
    x[4] = hi.x; x[5] = hi.y; x[6] = hi.z; x[7] = hi.w;
}

// The same columns of the global state (streaming stores).
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

// What a block needs of an item's sequence; n = 0: not served here (no tokens, chunked, past the end).
struct ItemDesc {
    int row_begin, n, slot, defer, spare;  // spare: the deferred span's spare slot, -1 none
};

// VER 2 (GatedDeltaNetParams::decode_version; bench/kernels/NOTES.md "GDN decode v2"): no global
// load on an item's compute path. Version 1 reads A_log[h], dt_bias[h] after the barrier that
// releases the stage and norm_w (twice: the second load is ordered after the first out store,
// which may alias it) inside the gated RMSNorm, so under the state stream's load every item
// waits for two to three L2 round trips while the other threads sit at the next barrier.
// Version 2 copies A_log[h], dt_bias[h] into the stage beside b, a (they arrive with the item,
// NS items ahead) and norm_w once per block into shared memory. Same arithmetic, same order:
// the results are bit-identical to version 1.
template <int D, bool BF16, int VER>
__global__ void __launch_bounds__(StreamTile<D, BF16, VER>::NT, 2) gdn_stream_kernel(RecArgs p) {
    using Tl = StreamTile<D, BF16, VER>;
    constexpr int NT = Tl::NT, TX = Tl::TX, NW = Tl::NW, RK = Tl::RK, NWARP = Tl::NWARP, PF = Tl::PF;
    constexpr int NS = Tl::NS, ESZ = Tl::ESZ;

    constexpr int NIN = VER == 2 ? 1 : 2;
    __shared__ __align__(16) float s_in[NIN][4 * D];      // token inputs q | k | v | z (v1: double buffer)
    __shared__ __align__(16) float s_red[NWARP][2 * D];   // per warp: Sᵀk | Sᵀq partials
    __shared__ __align__(16) float s_m_v1[VER == 2 ? 4 : 2 * D];
    float* const s_m = VER == 2 ? &s_red[0][0] : s_m_v1;  // Sᵀk | Sᵀq (version 2: in place in s_red[0])
    __shared__ int s_hdr[NS][5];                          // per stage: row_begin, n, slot, defer, spare
    __shared__ __align__(16) float s_nw[VER == 2 ? D : 4];  // version 2: norm_w (0 beyond Dv)
    __shared__ float s_gate[2];                             // version 2: the item's A_log[h], dt_bias[h]
    uint8_t* const stages = ptx::dynamic_smem();

    const int tid = threadIdx.x, tx = tid % TX, wy = tid / TX, lane = tid & 31, warp = tid >> 5;
    const int dk = p.Dk, dv = p.Dv, Nv = p.Nv, Nk = p.Nk, ratio = Nv / Nk;
    const int col = 8 * tx;     // this thread's first column
    const int nvc = dv - col;   // its valid columns: >= 8 all, 4 half, <= 0 none
    const bool vec16 = (dv & 7) == 0;
    const int64_t C = p.C, ZW = int64_t(Nv) * dv;
    const int total = p.num_seqs * Nv;
    const int stride = int(gridDim.x);

    auto load_desc = [&](int item) {
        ItemDesc d{0, 0, 0, 0, -1};
        if (item < total) {
            const DeviceSeq* sq = p.seqs + item / Nv;
            const int n = sq->num_tokens;
            if (n > 0 && !(p.chunk_min_tokens > 0 && n >= p.chunk_min_tokens) && !(n == 1 && p.skip_single)) {
                d.row_begin = sq->row_begin;
                d.n = n;
                d.slot = sq->state_slot;
                d.defer = sq->defer_state;
                d.spare = sq->spare_slot;
            }
        }
        return d;
    };
    // Copies item's state and first-token inputs into stage st (every thread its share) and commits
    // one cp.async group (empty when the item is not served: the group count stays uniform).
    auto issue = [&](int item, const ItemDesc& d, int st) {
        if (tid == 0) {
            s_hdr[st][0] = d.row_begin;
            s_hdr[st][1] = d.n;
            s_hdr[st][2] = d.slot;
            s_hdr[st][3] = d.defer;
            s_hdr[st][4] = d.spare;
        }
        if (d.n > 0) {
            const int h = item % Nv, kh = h / ratio;
            const uint32_t sa = ptx::smem_u32(stages + st * Tl::kStageBytes);
            const char* src = static_cast<const char*>(p.state) + ((int64_t(d.slot) * Nv + h) * dk * dv) * ESZ;
            const int chunks = dk * dv * ESZ / 16;
            for (int c = tid; c < chunks; c += NT) ptx::cp_async16(sa + 16u * uint32_t(c), src + 16 * int64_t(c), 16);
            const int64_t row = d.row_begin;
            const float* crow = p.conv + row * C;
            const int cq = dk / 4, cv = dv / 4;
            for (int c = tid; c < 2 * cq + 2 * cv; c += NT) {
                const float* s;
                int dst;
                if (c < cq) {
                    s = crow + kh * dk + 4 * c;
                    dst = 4 * c;
                } else if (c < 2 * cq) {
                    s = crow + Nk * dk + kh * dk + 4 * (c - cq);
                    dst = D + 4 * (c - cq);
                } else if (c < 2 * cq + cv) {
                    s = crow + 2 * Nk * dk + h * dv + 4 * (c - 2 * cq);
                    dst = 2 * D + 4 * (c - 2 * cq);
                } else {
                    s = p.z + row * ZW + h * dv + 4 * (c - 2 * cq - cv);
                    dst = 3 * D + 4 * (c - 2 * cq - cv);
                }
                ptx::cp_async16(sa + uint32_t(Tl::kInOff + 4 * dst), s, 16);
            }
            if (tid == NT - 1) {
                ptx::cp_async4(sa + uint32_t(Tl::kAbOff), p.b + row * Nv + h);
                ptx::cp_async4(sa + uint32_t(Tl::kAbOff + 4), p.a + row * Nv + h);
                if constexpr (VER == 2) {
                    ptx::cp_async4(sa + uint32_t(Tl::kAbOff + 8), p.A_log + h);
                    ptx::cp_async4(sa + uint32_t(Tl::kAbOff + 12), p.dt_bias + h);
                }
            }
        }
        ptx::cp_async_commit();
    };

    if constexpr (VER == 2)  // visible after the first item's barrier B0
        for (int t = tid; t < D; t += NT) s_nw[t] = t < dv ? p.norm_w[t] : 0.f;
    int item = int(blockIdx.x);
    // Stages in use: NS, or (version 2, the lab's decode_stages) fewer, to separate the third
    // stage's effect from the rest of version 2 on the device.
    const int ns = VER == 2 && p.stream_stages > 0 && p.stream_stages < NS ? p.stream_stages : NS;
#pragma unroll 1
    for (int s = 0; s < ns; ++s) issue(item + s * stride, load_desc(item + s * stride), s);
    ItemDesc nx = load_desc(item + ns * stride);  // the next item to copy

#pragma unroll 1
    for (int j = 0; item < total; ++j, item += stride) {
        const int st = VER == 2 ? j % ns : j % NS;
        if (VER == 1 || ns == NS) ptx::cp_async_wait<NS - 1>();  // this thread's copies of item j (group j) have landed
        else if (ns == 1) ptx::cp_async_wait<0>();
        else if (ns == 2) ptx::cp_async_wait<1>();
        else ptx::cp_async_wait<2>();
        __syncthreads();               // (B0) everyone's
        const int row_begin = s_hdr[st][0], n = s_hdr[st][1], slot = s_hdr[st][2], defer = s_hdr[st][3];
        const int spare = s_hdr[st][4];
        float S[RK][8];
        float bcur = 0.f, acur = 0.f;
        if (n > 0) {
            const uint8_t* sb = stages + st * Tl::kStageBytes;
#pragma unroll
            for (int i = 0; i < RK; ++i) {
                const int row = wy + NW * i;
                stage_read8<BF16>(sb, row * dv + col, row < dk ? nvc : 0, vec16, S[i]);
            }
            const float* in = reinterpret_cast<const float*>(sb + Tl::kInOff);
#pragma unroll
            for (int jj = 0; jj < PF; ++jj) {
                const int e = tid + NT * jj, part = e / D, idx = e % D;
                s_in[0][e] = idx < (part < 2 ? dk : dv) ? in[e] : 0.f;
            }
            const float* ab = reinterpret_cast<const float*>(sb + Tl::kAbOff);
            bcur = ab[0];
            acur = ab[1];
            // Version 2: the head's A_log, dt_bias through shared memory, read where used (fewer
            // registers live across the token loop than holding them from here).
            if constexpr (VER == 2)
                if (tid == 0) {
                    s_gate[0] = ab[2];
                    s_gate[1] = ab[3];
                }
        }
        __syncthreads();  // (B1) stage st read by everyone; token 0's inputs staged
        issue(item + ns * stride, nx, st);
        nx = load_desc(item + (ns + 1) * stride);
        if (n == 0) continue;

        const int h = item % Nv, kh = h / ratio;
        float A = 0.f, dtb = 0.f;
        if constexpr (VER == 1) {
            A = expf(p.A_log[h]);
            dtb = p.dt_bias[h];
        }
        float pf[PF], pb = 0.f, pa = 0.f;
        auto fetch = [&](int i) {  // inputs of token i >= 1 into registers
            const int64_t row = row_begin + i;
            const float* crow = p.conv + row * C;
#pragma unroll
            for (int jj = 0; jj < PF; ++jj) {
                const int e = tid + NT * jj, part = e / D, idx = e % D;
                float x = 0.f;
                if (part == 0) {
                    if (idx < dk) x = crow[kh * dk + idx];
                } else if (part == 1) {
                    if (idx < dk) x = crow[Nk * dk + kh * dk + idx];
                } else if (part == 2) {
                    if (idx < dv) x = crow[2 * Nk * dk + h * dv + idx];
                } else if (idx < dv) {
                    x = p.z[row * ZW + h * dv + idx];
                }
                pf[jj] = x;
            }
            pb = p.b[row * Nv + h];
            pa = p.a[row * Nv + h];
        };
        if (n > 1) fetch(1);

#pragma unroll 1
        for (int i = 0; i < n; ++i) {
            float* sin = s_in[NIN == 2 ? (i & 1) : 0];
            if (i > 0) {
                if constexpr (NIN == 1) __syncthreads();  // token i-1's reads of s_in are done
#pragma unroll
                for (int jj = 0; jj < PF; ++jj) sin[tid + NT * jj] = pf[jj];
                bcur = pb;
                acur = pa;
                if (i + 1 < n) fetch(i + 1);
                __syncthreads();  // (S1) inputs of token i staged (token 0: B1)
            }
            const float* q = sin;
            const float* k = sin + D;
            const QkNorms nr = qk_norms_warp<D>(q, k, lane);
            // Partial Sᵀk, Sᵀq over this thread's rows, then over the warp's row groups (lanes with
            // the same tx: xor TX .. 16), then over the warps (one column sum per thread).
            float pk[8], pq[8];
#pragma unroll
            for (int c = 0; c < 8; ++c) { pk[c] = 0.f; pq[c] = 0.f; }
#pragma unroll
            for (int r = 0; r < RK; ++r) {
                const int row = wy + NW * r;
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
                st4(&s_red[warp][col], make_float4(pk[0], pk[1], pk[2], pk[3]));
                st4(&s_red[warp][col + 4], make_float4(pk[4], pk[5], pk[6], pk[7]));
                st4(&s_red[warp][D + col], make_float4(pq[0], pq[1], pq[2], pq[3]));
                st4(&s_red[warp][D + col + 4], make_float4(pq[4], pq[5], pq[6], pq[7]));
            }
            __syncthreads();  // (S2) partials visible
            for (int t = tid; t < 2 * D; t += NT) {
                float acc = 0.f;
#pragma unroll
                for (int w = 0; w < NWARP; ++w) acc += s_red[w][t];
                s_m[t] = acc;
            }
            __syncthreads();  // (S3) sums visible
            float mk[8], mq[8];
            {
                const float4 k0 = ld4(&s_m[col]), k1 = ld4(&s_m[col + 4]);
                const float4 q0 = ld4(&s_m[D + col]), q1 = ld4(&s_m[D + col + 4]);
                mk[0] = k0.x; mk[1] = k0.y; mk[2] = k0.z; mk[3] = k0.w;
                mk[4] = k1.x; mk[5] = k1.y; mk[6] = k1.z; mk[7] = k1.w;
                mq[0] = q0.x; mq[1] = q0.y; mq[2] = q0.z; mq[3] = q0.w;
                mq[4] = q1.x; mq[5] = q1.y; mq[6] = q1.z; mq[7] = q1.w;
            }
            const float rk = 1.0f / sqrtf(nr.kk + 1e-6f);
            const float rq = p.q_scale / sqrtf(nr.qq + 1e-6f);
            const float beta = sigmoid_f(bcur);
            if constexpr (VER == 2) {  // s_gate was written before B1
                A = expf(s_gate[0]);
                dtb = s_gate[1];
            }
            const float decay = expf(-A * softplus_f(acur + dtb));
            const float dm = decay * rk, dq = decay * rq, qkn = nr.qk * rk * rq;
            const float* v = sin + 2 * D + col;
            float dl[8], o[8];
#pragma unroll
            for (int c = 0; c < 8; ++c) {
                dl[c] = beta * (v[c] - dm * mk[c]);
                o[c] = fmaf(dq, mq[c], qkn * dl[c]);
            }
#pragma unroll
            for (int r = 0; r < RK; ++r) {
                const float kr = k[wy + NW * r] * rk;
#pragma unroll
                for (int c = 0; c < 8; ++c) S[r][c] = fmaf(decay, S[r][c], kr * dl[c]);
            }
            if (i == 0 && defer) {  // MTP verification: the state after the kept first row
                const int64_t sbase = (int64_t(slot) * Nv + h) * dk * dv;
#pragma unroll
                for (int r = 0; r < RK; ++r) {
                    const int row = wy + NW * r;
                    if (row < dk) store8<BF16>(p.state, sbase + int64_t(row) * dv + col, nvc, vec16, S[r]);
                }
            }
            // Gated RMSNorm over the head's Dv outputs: one row group's TX lanes hold all columns.
            float ss = 0.f;
#pragma unroll
            for (int c = 0; c < 8; ++c) ss = fmaf(o[c], o[c], ss);
#pragma unroll
            for (int sh = TX / 2; sh >= 1; sh >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, sh);
            if (wy == 0 && nvc > 0) {
                const float inv = 1.0f / sqrtf(ss / float(dv) + p.eps);
                const float* z = sin + 3 * D + col;
                float* orow = p.out + (int64_t(row_begin) + i) * ZW + int64_t(h) * dv + col;
                const float4 w0 = VER == 2 ? ld4(&s_nw[col]) : ld4(p.norm_w + col);
                st4(orow, make_float4(w0.x * (o[0] * inv) * silu_f(z[0]), w0.y * (o[1] * inv) * silu_f(z[1]),
                                      w0.z * (o[2] * inv) * silu_f(z[2]), w0.w * (o[3] * inv) * silu_f(z[3])));
                if (nvc >= 8) {
                    const float4 w1 = VER == 2 ? ld4(&s_nw[col + 4]) : ld4(p.norm_w + col + 4);
                    st4(orow + 4, make_float4(w1.x * (o[4] * inv) * silu_f(z[4]), w1.y * (o[5] * inv) * silu_f(z[5]),
                                              w1.z * (o[6] * inv) * silu_f(z[6]), w1.w * (o[7] * inv) * silu_f(z[7])));
                }
            }
        }

        // MTP verification: rows 1.. are gdn_commit's (accepted drafts), or, with a spare slot, the
        // state after the last row goes there (taken on a full acceptance).
        if (defer && spare < 0) continue;
        const int64_t sbase = (int64_t(defer ? spare : slot) * Nv + h) * dk * dv;
#pragma unroll
        for (int i = 0; i < RK; ++i) {
            const int row = wy + NW * i;
            if (row < dk) store8<BF16>(p.state, sbase + int64_t(row) * dv + col, nvc, vec16, S[i]);
        }
    }
    ptx::cp_async_wait<0>();  // no copy outlives the block (they are all empty by now)
}

template <int D, bool BF16, int VER>
void launch_stream_t(const RecArgs& a, int blocks, cudaStream_t stream) {
    using Tl = StreamTile<D, BF16, VER>;
    allow_dynamic_smem<gdn_stream_kernel<D, BF16, VER>>(Tl::kSmemBytes);
    gdn_stream_kernel<D, BF16, VER><<<unsigned(blocks), Tl::NT, Tl::kSmemBytes, stream>>>(a);
    QS_CUDA_CHECK_LAUNCH();
}

}  // namespace

template <int D>
void launch_stream(const RecArgs& a, bool bf16, int version, int blocks, cudaStream_t stream) {
    if (version == 2) {
        if (bf16) launch_stream_t<D, true, 2>(a, blocks, stream);
        else launch_stream_t<D, false, 2>(a, blocks, stream);
        return;
    }
    if (bf16) launch_stream_t<D, true, 1>(a, blocks, stream);
    else launch_stream_t<D, false, 1>(a, blocks, stream);
}

template <int D, bool BF16, int VER>
int stream_blocks_per_sm() {
    using Tl = StreamTile<D, BF16, VER>;
    allow_dynamic_smem<gdn_stream_kernel<D, BF16, VER>>(Tl::kSmemBytes);
    int n = 0;
    QS_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, gdn_stream_kernel<D, BF16, VER>, Tl::NT,
                                                                Tl::kSmemBytes));
    return n;
}

template void launch_stream<32>(const RecArgs&, bool, int, int, cudaStream_t);
template void launch_stream<64>(const RecArgs&, bool, int, int, cudaStream_t);
template void launch_stream<128>(const RecArgs&, bool, int, int, cudaStream_t);

}  // namespace qs::cuda::gdn

namespace qs::cuda {

int gdn_decode_stream_plan(int D, bool bf16, int version, int* stages) {
    using namespace gdn;
    GDN_REQUIRE(D == 32 || D == 64 || D == 128);
    GDN_REQUIRE(version == 1 || version == 2);
    auto pick = [&](auto tile, int n) {
        if (stages) *stages = decltype(tile)::NS;
        return n;
    };
#define QS_GDN_PLAN(DD, B, V) \
    if (D == DD && bf16 == B && version == V) return pick(StreamTile<DD, B, V>{}, stream_blocks_per_sm<DD, B, V>());
    QS_GDN_PLAN(32, true, 1) QS_GDN_PLAN(32, false, 1) QS_GDN_PLAN(32, true, 2) QS_GDN_PLAN(32, false, 2)
    QS_GDN_PLAN(64, true, 1) QS_GDN_PLAN(64, false, 1) QS_GDN_PLAN(64, true, 2) QS_GDN_PLAN(64, false, 2)
    QS_GDN_PLAN(128, true, 1) QS_GDN_PLAN(128, false, 1) QS_GDN_PLAN(128, true, 2) QS_GDN_PLAN(128, false, 2)
#undef QS_GDN_PLAN
    return 0;
}

}  // namespace qs::cuda

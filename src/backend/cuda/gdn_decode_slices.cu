// Gated DeltaNet, step 2c: the single-token sequences (plain decode rows) with bf16 state, one warp
// per 16 value columns of a (sequence, value head); GatedDeltaNetParams::decode_kernel = 2
// (gdn_kernels.h). CPU reference: src/backend/cpu/cpu_gdn.cpp. Same maths as gdn_serial.cu:
//   mk = Sᵀk, mq = Sᵀq (raw q, k),  δ = β (v − decay·r_k·mk),  o = decay·r_q·mq + (q̂·k̂) δ,
//   S ← decay·S + k̂ δᵀ,  out = gated RMSNorm(o).
// Why another decode kernel (bench/kernels/NOTES.md "GDN decode v5: warp slices"): gdn_decode.cu
// streams whole [D, D] states through shared memory, but every item passes four block barriers and a
// column sum through shared memory, and reaches 62 % of copy bandwidth at 512 sequences. For one
// token the value columns are independent: column c needs only S[:, c], q, k, v_c, z_c and the
// gates. So here a warp owns 16 columns of one head (D rows × 32 bytes of bf16 state) and does
// everything for them without a barrier, except one per item for the gated RMSNorm's sum over the
// head's columns.
//
// gdn_slices_kernel<D> (D = Dk = Dv = 64 or 128): persistent blocks of D/16 warps; block b serves the
//   items (sequence s, value head h) = item / Nv, item % Nv for item = b, b + gridDim.x, ...; warp w
//   takes columns 16w .. 16w + 15 of every item. Lane (rg = lane / 2, hf = lane % 2) holds rows
//   rg + 16i (i < D/16) and columns 16w + 8hf .. + 7: one 16-byte chunk per row. The state comes by
//   cp.async into a ring of kSliceStages items in shared memory, two items ahead of the one computed:
//   version 1 a lane-private ring (each lane copies and reads back its own chunks: no barrier, but
//   every warp instruction moves 16 rows × 32 bytes, sixteen sectors of sixteen lines), version 2
//   (SHARED_RING below, the default) a ring the block shares, filled by whole rows; the token inputs
//   (q, k at the lane's rows, v, z at one column, b, a, A_log, dt_bias) come by plain loads one
//   item ahead, into registers. Per item: Sᵀk and Sᵀq partials over the lane's rows (16 values),
//   a transposing reduction over the 16 row lanes (15 shuffles: lane rg ends with value rg, i.e.
//   Sᵀk of column rg for rg < 8, Sᵀq of column rg − 8 above), δ and o per column, δ broadcast to
//   the lanes by 8 shuffles, the update re-read from the ring and stored as bf16 (streaming
//   stores), and the norm: each warp's Σo² into shared memory, one barrier, the head's sum.
// Only sequences with exactly one token are served; the others belong to the chunked kernel or to
// gdn_serial.cu / gdn_decode.cu (launch_gdn_recurrence tells those to skip single tokens when this
// kernel runs beside them). defer_state (MTP verification) with one token: the state goes to its
// slot and, with a spare slot, to the spare too (what gdn_serial.cu does for a one-token span).
// Not bit-identical to gdn_serial.cu or gdn_decode.cu (other summation orders); within the same
// bounds of the reference.
#include "backend/cuda/device_limits.h"
#include "backend/cuda/gdn_common.cuh"
#include "backend/cuda/ptx_helpers.cuh"

namespace qs::cuda::gdn {
namespace {

constexpr int kSliceCols = 16;   // value columns per warp
constexpr int kSliceStages = 3;  // ring items per lane: the one computed and two ahead

template <int D>
struct SliceTile {
    static constexpr int NWARP = D / kSliceCols;  // warps per block = column slices per head
    static constexpr int NT = NWARP * 32;
    static constexpr int RL = D / 16;             // rows per lane
    static constexpr int kLaneStage = RL * 16;    // bytes of one item's chunks per lane
    static constexpr int kWarpStage = 32 * kLaneStage;
    // Version 1 ring: [warp][stage][chunk i][lane] 16-byte chunks (lane-major per chunk: conflict-free reads).
    static constexpr int kSmemBytes = NWARP * kSliceStages * kWarpStage;  // 96 KB at D = 128
    // Version 2 ring: [stage][row][2D + 32 bytes] whole states, rows padded so that the 8 lanes of a
    // quarter warp (4 rows x 2 chunks) hit 8 distinct 16-byte bank groups.
    static constexpr int kRowBytes = 2 * D + 32;
    static constexpr int kSlotBytes = D * kRowBytes;
    static constexpr int kSmemBytesShared = kSliceStages * kSlotBytes;  // 108 KB at D = 128
    static constexpr int kChunksPerRow = 2 * D / 16;
    static constexpr int kChunksPerThread = D * kChunksPerRow / NT;      // 8 at D = 128, 4 at D = 64
    static_assert(D % 16 == 0 && NWARP >= 1 && NT <= 1024, "bad tile");
    static_assert(D * kChunksPerRow % NT == 0, "whole chunks per thread");
};

__device__ __forceinline__ float bf16_lo(uint32_t u) { return __uint_as_float(u << 16); }
__device__ __forceinline__ float bf16_hi(uint32_t u) { return __uint_as_float(u & 0xffff0000u); }
__device__ __forceinline__ uint32_t pack_bf16x2(float lo, float hi) {
    const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<const uint32_t*>(&v);
}
__device__ __forceinline__ void unpack8(const uint4& u, float (&x)[8]) {
    x[0] = bf16_lo(u.x); x[1] = bf16_hi(u.x); x[2] = bf16_lo(u.y); x[3] = bf16_hi(u.y);
    x[4] = bf16_lo(u.z); x[5] = bf16_hi(u.z); x[6] = bf16_lo(u.w); x[7] = bf16_hi(u.w);
}

// An item's sequence as this kernel needs it; served = 0: not a single-token sequence (or past the end).
struct SliceDesc {
    int served, row, slot, spare;  // spare: the slot that also takes the state (defer_state), -1 none
};

// The DeviceSeq fields of an item as loaded, not yet tested: the loads are issued one item before the
// test, so no branch waits on a global load inside the item loop (a branch on a just-loaded value
// stalls every warp of the block until the load returns, once per item).
struct SliceRaw {
    int tokens, row, slot, defer, spare;
};

// The token inputs of one item for this lane (registers, one item ahead).
template <int RL>
struct SliceInputs {
    float q[RL], k[RL];
    float v, z, b, a, A_log, dt_bias;
};

// SHARED_RING (version 2): the same work, but the state arrives in a ring shared by the block's warps,
// copied row-contiguously (a warp instruction moves 512 whole bytes: four 128-byte lines) instead of
// lane-privately (16 rows x 32 bytes: sixteen sectors of sixteen lines). Nsight Compute on version 1
// (bench/kernels/NOTES.md "GDN decode v5") found L2 the busiest unit (81 %, DRAM 60 %) and the
// cp.async shared-memory writes at 16 wavefronts where 4 suffice. Each thread waits for its own
// copies of the next item before the item's norm barrier, which then publishes them to every warp;
// a slot is refilled after the barrier that ends its item. Same arithmetic: bit-identical results.
// VER 3 (RING_STORES): the stores too by whole rows. Each lane writes its updated chunks back into
// the slot, in place (only it reads them); after the item's barrier each thread stores the chunks
// it copied in (512 contiguous bytes per warp instruction), before it refills that slot.
template <int D, int VER>
__global__ void __launch_bounds__(SliceTile<D>::NT, 2) gdn_slices_kernel(RecArgs p) {
    constexpr bool SHARED_RING = VER >= 2, RING_STORES = VER == 3;
    using Tl = SliceTile<D>;
    constexpr int RL = Tl::RL, NWARP = Tl::NWARP;
    __shared__ float s_ss[2][NWARP];  // per warp Σo² of its columns; double-buffered by served item
    uint8_t* const ring = ptx::dynamic_smem();

    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int rg = lane >> 1, hf = lane & 1;
    const int c8 = kSliceCols * warp + 8 * hf;      // the lane's first state column
    const int ccol = kSliceCols * warp + 8 * hf + (rg & 7);  // the column whose δ, o this lane computes
    const int Nv = p.Nv, Nk = p.Nk, ratio = Nv / Nk;
    const int64_t C = p.C, ZW = int64_t(Nv) * D;
    const int total = p.num_seqs * Nv, stride = int(gridDim.x);
    const float nw = p.norm_w[ccol];
    const int ring_lane = warp * kSliceStages * Tl::kWarpStage + 16 * lane;  // byte offset of the lane's chunk 0
    const uint32_t ring_u32 = ptx::smem_u32(ring);

    const bool single_is_chunk = p.chunk_min_tokens > 0 && 1 >= p.chunk_min_tokens;
    auto raw_of = [&](int item) {  // branches on item only
        SliceRaw r{0, 0, 0, 0, -1};
        if (item < total) {
            const DeviceSeq* sq = p.seqs + item / Nv;
            r.tokens = sq->num_tokens;
            r.row = sq->row_begin;
            r.slot = sq->state_slot;
            r.defer = sq->defer_state;
            r.spare = sq->spare_slot;
        }
        return r;
    };
    auto desc_from = [&](const SliceRaw& r) {
        SliceDesc d{0, 0, 0, -1};
        if (r.tokens == 1 && !single_is_chunk) {
            d.served = 1;
            d.row = r.row;
            d.slot = r.slot;
            d.spare = r.defer ? r.spare : -1;
        }
        return d;
    };
    auto state_base = [&](int slot, int h) {  // the (slot, head) state, [D, D] bf16
        return static_cast<__nv_bfloat16*>(p.state) + (int64_t(slot) * Nv + h) * D * D;
    };
    auto state_at = [&](int slot, int h) {  // the lane's first chunk of the (slot, head) state
        return state_base(slot, h) + int64_t(rg) * D + c8;
    };
    // One cp.async group per item and lane (empty when not served: the group count stays uniform).
    auto issue = [&](int item, const SliceDesc& d, int st) {
        if constexpr (SHARED_RING) {
            if (d.served) {  // chunk c = tid + NT·i of the state: row c / kChunksPerRow, 16 bytes at its position
                const char* src = reinterpret_cast<const char*>(state_base(d.slot, item % Nv));
                const uint32_t dst = ring_u32 + uint32_t(st * Tl::kSlotBytes);
#pragma unroll
                for (int i = 0; i < Tl::kChunksPerThread; ++i) {
                    const int c = tid + Tl::NT * i, r = c / Tl::kChunksPerRow, cc = c % Tl::kChunksPerRow;
                    ptx::cp_async16(dst + uint32_t(r * Tl::kRowBytes + 16 * cc), src + 16 * int64_t(c), 16);
                }
            }
            ptx::cp_async_commit();
            return;
        }
        if (d.served) {
            const __nv_bfloat16* src = state_at(d.slot, item % Nv);
            const uint32_t dst = ring_u32 + uint32_t(ring_lane + st * Tl::kWarpStage);
#pragma unroll
            for (int i = 0; i < RL; ++i) ptx::cp_async16(dst + uint32_t(i * 32 * 16), src + int64_t(16 * i) * D, 16);
        }
        ptx::cp_async_commit();
    };
    auto inputs_of = [&](int item, const SliceDesc& d, SliceInputs<RL>& in) {
        if (!d.served) return;
        const int h = item % Nv, kh = h / ratio;
        const float* crow = p.conv + int64_t(d.row) * C;
#pragma unroll
        for (int i = 0; i < RL; ++i) {
            in.q[i] = crow[kh * D + rg + 16 * i];
            in.k[i] = crow[Nk * D + kh * D + rg + 16 * i];
        }
        in.v = crow[2 * Nk * D + h * D + ccol];
        in.z = p.z[int64_t(d.row) * ZW + h * D + ccol];
        in.b = p.b[int64_t(d.row) * Nv + h];
        in.a = p.a[int64_t(d.row) * Nv + h];
        in.A_log = p.A_log[h];
        in.dt_bias = p.dt_bias[h];
    };

    int item = int(blockIdx.x);
    SliceDesc d0 = desc_from(raw_of(item)), d1 = desc_from(raw_of(item + stride));
    issue(item, d0, 0);
    issue(item + stride, d1, 1);
    SliceDesc d2 = desc_from(raw_of(item + 2 * stride));
    SliceRaw r3 = raw_of(item + 3 * stride);  // tested one item later
    if constexpr (SHARED_RING) {  // item 0's copies landed and visible to every warp
        ptx::cp_async_wait<1>();
        __syncthreads();
    }
    SliceInputs<RL> nxt;
    inputs_of(item, d0, nxt);
    int computed = 0;  // items computed so far by this block (uniform): picks the s_ss buffer

#pragma unroll 1
    for (int j = 0; item < total; ++j, item += stride) {
        const SliceDesc cur = d0;
        const SliceInputs<RL> in = nxt;
        // The ring slot of item j + 2 is the one item j − 1 used: this lane's reads of it are done
        // (version 2: every warp's, at the barrier that ended item j − 1).
        issue(item + 2 * stride, d2, (j + 2) % kSliceStages);
        inputs_of(item + stride, d1, nxt);
        d0 = d1;
        d1 = d2;
        d2 = desc_from(r3);  // loaded an item ago
        r3 = raw_of(item + 4 * stride);
        if constexpr (!SHARED_RING) ptx::cp_async_wait<2>();  // item j's chunks (group j) have landed
        if (!cur.served) {  // uniform over the block (the item decides)
            if constexpr (SHARED_RING) {  // still publish item j + 1 (see the norm below)
                ptx::cp_async_wait<1>();
                __syncthreads();
            }
            continue;
        }

        const int h = item % Nv;
        // The lane's 16-byte chunk of rows rg + 16i, columns c8 .. c8 + 7.
        uint8_t* const slot = ring + (j % kSliceStages) * (SHARED_RING ? Tl::kSlotBytes : Tl::kWarpStage);
        auto chunk_at = [&](int i) {
            if constexpr (SHARED_RING)
                return reinterpret_cast<uint4*>(slot + (rg + 16 * i) * Tl::kRowBytes + 2 * c8);
            else
                return reinterpret_cast<uint4*>(slot + ring_lane + 512 * i);
        };
        auto chunk = [&](int i) { return *chunk_at(i); };
        // Norms over the head's D rows: the lane's rows, then the 16 row lanes (hf pairs hold the same rows).
        float qq = 0.f, kk = 0.f, qk = 0.f;
#pragma unroll
        for (int i = 0; i < RL; ++i) {
            qq = fmaf(in.q[i], in.q[i], qq);
            kk = fmaf(in.k[i], in.k[i], kk);
            qk = fmaf(in.q[i], in.k[i], qk);
        }
#pragma unroll
        for (int sh = 2; sh < 32; sh <<= 1) {
            qq += __shfl_xor_sync(0xffffffffu, qq, sh);
            kk += __shfl_xor_sync(0xffffffffu, kk, sh);
            qk += __shfl_xor_sync(0xffffffffu, qk, sh);
        }
        // Partials: v[0..7] Sᵀk, v[8..15] Sᵀq of the lane's 8 columns over its rows.
        float v[16];
#pragma unroll
        for (int e = 0; e < 16; ++e) v[e] = 0.f;
#pragma unroll
        for (int i = 0; i < RL; ++i) {
            float s[8];
            unpack8(chunk(i), s);
#pragma unroll
            for (int e = 0; e < 8; ++e) {
                v[e] = fmaf(s[e], in.k[i], v[e]);
                v[8 + e] = fmaf(s[e], in.q[i], v[8 + e]);
            }
        }
        // Transposing reduction over the row lanes (lane bits 4, 3, 2, 1 = rg bits 3, 2, 1, 0): at each
        // step a lane keeps the half of its values selected by its bit and adds the partner's copy of it.
#pragma unroll
        for (int e = 0; e < 8; ++e) {
            const bool up = (rg & 8) != 0;
            const float send = up ? v[e] : v[e + 8], keep = up ? v[e + 8] : v[e];
            v[e] = keep + __shfl_xor_sync(0xffffffffu, send, 16);
        }
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            const bool up = (rg & 4) != 0;
            const float send = up ? v[e] : v[e + 4], keep = up ? v[e + 4] : v[e];
            v[e] = keep + __shfl_xor_sync(0xffffffffu, send, 8);
        }
#pragma unroll
        for (int e = 0; e < 2; ++e) {
            const bool up = (rg & 2) != 0;
            const float send = up ? v[e] : v[e + 2], keep = up ? v[e + 2] : v[e];
            v[e] = keep + __shfl_xor_sync(0xffffffffu, send, 4);
        }
        {
            const bool up = (rg & 1) != 0;
            const float send = up ? v[0] : v[1], keep = up ? v[1] : v[0];
            v[0] = keep + __shfl_xor_sync(0xffffffffu, send, 2);
        }
        // Lane rg now holds value rg: Sᵀk of column ccol (rg < 8) or Sᵀq of it (rg >= 8); lane ^ 16 the other.
        const float other = __shfl_xor_sync(0xffffffffu, v[0], 16);
        const float mk = rg < 8 ? v[0] : other, mq = rg < 8 ? other : v[0];
        const float rk = 1.0f / sqrtf(kk + 1e-6f);
        const float rq = p.q_scale / sqrtf(qq + 1e-6f);
        const float beta = sigmoid_f(in.b);
        const float decay = expf(-expf(in.A_log) * softplus_f(in.a + in.dt_bias));
        const float dm = decay * rk, dq = decay * rq, qkn = qk * rk * rq;
        const float dl = beta * (in.v - dm * mk);
        const float o = fmaf(dq, mq, qkn * dl);
        float dle[8];  // δ of the lane's 8 state columns: column e is computed by lane (rg = e, hf)
#pragma unroll
        for (int e = 0; e < 8; ++e) dle[e] = __shfl_sync(0xffffffffu, dl, 2 * e + hf);
        // Update from the ring, store bf16 (its slot, and the spare slot of a deferred span).
        [[maybe_unused]] __nv_bfloat16* dst = state_at(cur.slot, h);
        [[maybe_unused]] __nv_bfloat16* dst2 = cur.spare >= 0 ? state_at(cur.spare, h) : nullptr;
#pragma unroll
        for (int i = 0; i < RL; ++i) {
            float s[8];
            unpack8(chunk(i), s);
            const float kr = in.k[i] * rk;
#pragma unroll
            for (int e = 0; e < 8; ++e) s[e] = fmaf(decay, s[e], kr * dle[e]);
            uint4 u;
            u.x = pack_bf16x2(s[0], s[1]);
            u.y = pack_bf16x2(s[2], s[3]);
            u.z = pack_bf16x2(s[4], s[5]);
            u.w = pack_bf16x2(s[6], s[7]);
            if constexpr (RING_STORES) {
                *chunk_at(i) = u;  // stored by whole rows after the barrier
            } else {
                __stcs(reinterpret_cast<uint4*>(dst + int64_t(16 * i) * D), u);
                if (dst2) __stcs(reinterpret_cast<uint4*>(dst2 + int64_t(16 * i) * D), u);
            }
        }
        // Gated RMSNorm over the head's D columns: lanes rg < 8 hold one column each.
        float ss = rg < 8 ? o * o : 0.f;
#pragma unroll
        for (int sh = 16; sh >= 1; sh >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, sh);
        const int buf = computed & 1;
        ++computed;
        if (lane == 0) s_ss[buf][warp] = ss;
        // Version 2: this thread's copies of item j + 1 have landed; the barrier shows them to every warp.
        if constexpr (SHARED_RING) ptx::cp_async_wait<1>();
        __syncthreads();  // every warp's Σo² of this item (the buffer is next written two items on)
        float tot = 0.f;
#pragma unroll
        for (int w = 0; w < NWARP; ++w) tot += s_ss[buf][w];
        if (rg < 8) {
            const float inv = 1.0f / sqrtf(tot / float(D) + p.eps);
            p.out[int64_t(cur.row) * ZW + int64_t(h) * D + ccol] = nw * (o * inv) * silu_f(in.z);
        }
        if constexpr (RING_STORES) {  // the chunks this thread copied in, now updated by their lanes
            char* g = reinterpret_cast<char*>(state_base(cur.slot, h));
            char* g2 = cur.spare >= 0 ? reinterpret_cast<char*>(state_base(cur.spare, h)) : nullptr;
#pragma unroll
            for (int i = 0; i < Tl::kChunksPerThread; ++i) {
                const int c = tid + Tl::NT * i, r = c / Tl::kChunksPerRow, cc = c % Tl::kChunksPerRow;
                const uint4 u = *reinterpret_cast<const uint4*>(slot + r * Tl::kRowBytes + 16 * cc);
                __stcs(reinterpret_cast<uint4*>(g + 16 * int64_t(c)), u);
                if (g2) __stcs(reinterpret_cast<uint4*>(g2 + 16 * int64_t(c)), u);
            }
        }
    }
    ptx::cp_async_wait<0>();  // no copy outlives the block (the last groups are empty)
}

// Sets the dynamic shared-memory opt-in on the current device and returns the resident blocks per
// SM there (cached per device).
template <int D, int VER>
int slices_blocks_per_sm() {
    static std::array<std::atomic<int>, kMaxDevices> per_sm{};
    const int dev = current_device();
    using Tl = SliceTile<D>;
    const int smem = VER >= 2 ? Tl::kSmemBytesShared : Tl::kSmemBytes;
    allow_dynamic_smem<gdn_slices_kernel<D, VER>>(size_t(smem));
    int n = per_sm[size_t(dev)].load(std::memory_order_relaxed);
    if (n != 0) return n;
    QS_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, gdn_slices_kernel<D, VER>, Tl::NT, smem));
    if (n < 1) n = 2;  // the emulation reports -1
    per_sm[size_t(dev)].store(n, std::memory_order_relaxed);
    return n;
}

}  // namespace

bool slices_supported(int Dk, int Dv, bool bf16) { return bf16 && Dk == Dv && (Dk == 64 || Dk == 128); }

template <int D>
void launch_slices(const RecArgs& a, int version, int blocks, int sms, cudaStream_t stream) {
    using Tl = SliceTile<D>;
    GDN_REQUIRE(a.Dk == D && a.Dv == D);
    GDN_REQUIRE(version >= 1 && version <= 3);
    const int64_t items = int64_t(a.num_seqs) * a.Nv;
    if (items == 0) return;
    const int per_sm = version == 3   ? slices_blocks_per_sm<D, 3>()
                       : version == 2 ? slices_blocks_per_sm<D, 2>()
                                      : slices_blocks_per_sm<D, 1>();
    const int64_t cap = int64_t(per_sm) * sms;
    if (blocks <= 0) blocks = int(items < cap ? items : cap);
    if (version == 3) gdn_slices_kernel<D, 3><<<unsigned(blocks), Tl::NT, Tl::kSmemBytesShared, stream>>>(a);
    else if (version == 2) gdn_slices_kernel<D, 2><<<unsigned(blocks), Tl::NT, Tl::kSmemBytesShared, stream>>>(a);
    else gdn_slices_kernel<D, 1><<<unsigned(blocks), Tl::NT, Tl::kSmemBytes, stream>>>(a);
    QS_CUDA_CHECK_LAUNCH();
}

template void launch_slices<64>(const RecArgs&, int, int, int, cudaStream_t);
template void launch_slices<128>(const RecArgs&, int, int, int, cudaStream_t);

}  // namespace qs::cuda::gdn

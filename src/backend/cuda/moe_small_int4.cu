// MoE small-T path with INT4 W4A16 or NVFP4 experts (T <= kMoeSmallTMax; issue 18 item 4). The same plan,
// routing launch (moe_small_route.cu) and stage structure as moe_small.cu, whose header comment
// describes them; only the weight reads differ: each expert matrix is in the device INT4 layout
// (backend/int4_layout.h: u32 codes [rows, cols/8] of q's two's complement nibbles, bf16 scales [rows, cols/group]),
// half the bytes of FP8, unpacked in registers (int4_unpack.cuh) and multiplied by the group's
// scale per 8-input word, fp32 sums. x and h are rounded to bf16 as on the BF16 path (no fp8
// scaling), so y agrees with the BF16 small-T path on the dequantised weights up to fp32
// summation order.
//  gate_up: grid (max(I, I_shared) / kSmallRows, max slots); warp w takes intermediate rows
//           n0 + 2w, n0 + 2w + 1 (gate and up); lane l reads 16-byte chunks c = l, l + 32, ... (32
//           codes: a 2048-wide row is 64 chunks) of its 4 rows; x of the slot's tokens staged in
//           shared memory, 32 values per chunk padded to 36 floats (conflict-free float4 reads).
//           Version 1 of MoeParams::small_int4_gate_up_version; version 2, on tensor cores for INT4
//           groups of a multiple of 128 (SmallPlan::gate_up_mma), is moe_small_int4_gate_up_mma.cu.
//  down:    grid (T, H / kSmallCols); warp = output column of one token; lane reads 8 bytes (16
//           codes) per step so that a 512-wide row (256 bytes) keeps all 32 lanes busy; the
//           routed experts in j order then the shared one, combined as moe_combine.cu sums.
//  down by slots (SmallPlan::down_version 2, MoeParams::small_down_version 2; the FP8 / BF16 form is
//           moe_small_down_slots.cu, whose comment says why): grid H / kSmallCols at any T, warp =
//           output column of every token; the block stages the plan, the slots' code and scale
//           pointers (and NVFP4 globals), the routing weights and all T·(k + 1) h rows in shared
//           memory; each lane loads its 8-byte pieces of down_e[col, :] and their scales for up to
//           kSlotBatch slots at once (one round trip for the 9 slots of a one-token step) and
//           computes every dot of those slots exactly as the kernel above (the same pieces per lane
//           in the same order, the butterfly), then lane t sums y[t][col] in j order plus the gated
//           shared expert: y is bitwise the kernel above's.
// NVFP4 experts (SmallPlan::nvfp4, CudaOptions::nvfp4_kernels) take the same kernels instantiated
// for Code4::kNvfp4: the codes unpack to E2M1 values (int4_unpack.cuh), the group is 16 (the bf16
// block scales, one per two words), and each dot product is multiplied once by its matrix's fp32
// global (SmallParams::qglobal) before the SiLU (gate, up) or the routing weight (down).
// Also compiles as host C++ for the CPU emulation (bench/kernels/moe_emu.cpp --int4, --nvfp4).
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/device_limits.h"
#include "backend/cuda/int4_unpack.cuh"
#include "backend/cuda/moe_common.cuh"
#if !defined(QS_MOE_EMULATE)
#include "backend/cuda/ptx_helpers.cuh"
#endif
#include "backend/cuda/moe_small_math.cuh"
#include "backend/cuda/moe_small_slots.cuh"

namespace qs::cuda::moe {
namespace small_int4 {

using namespace small_math;

constexpr int kWarps = kSmallThreads / 32;
constexpr int kRPW = kSmallRows / kWarps;  // intermediate rows per warp (gate + up each)
constexpr int kVPC = 32, kPad = 4;         // x values per 16-byte code chunk, shared-memory padding
constexpr int kDownGroup = 3;              // dots whose loads are in flight together

__device__ __forceinline__ int x_row(int H) { return H / kVPC * (kVPC + kPad); }
static_assert(2048 / kVPC * (kVPC + kPad) <= 2048 / 16 * 20, "small_x_row_floats sizes the shared memory");

__device__ __forceinline__ int token_of_dest(const SmallParams& p, int dest) {
    return dest < p.T * p.k ? dest / p.k : dest - p.T * p.k;
}
__device__ __forceinline__ int token_bucket(int n) { return n <= 1 ? 1 : n <= 2 ? 2 : n <= 4 ? 4 : 8; }
__device__ __forceinline__ int slot_dest_of(const SmallParams& p, int slot, int n) {
    return slot == 0 ? p.T * p.k + n : p.slot_dest[slot * p.T + n];
}

// The down kernels' dot of one 8-code word with 8 bf16 h values (v1 and by slots: the same order).
template <w4::Code4 F>
__device__ __forceinline__ float down_word_dot(uint32_t codes, const uint4& hv) {
    float wf[8];
    w4::unpack8<F>(codes, wf);
    float d = 0.0f;
#pragma unroll
    for (int q = 0; q < 4; ++q) {
        const uint32_t hw = word(hv, q);
        d = fmaf(wf[2 * q], bits_f32(hw << 16), d);
        d = fmaf(wf[2 * q + 1], bits_f32(hw & 0xFFFF0000u), d);
    }
    return d;
}

template <w4::Code4 F, int N>
__device__ __forceinline__ void gate_up_rows(const SmallParams& p, float* xs, int slot, int e, int nt, int nb, int n0) {
    constexpr int NR = 2 * kRPW;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int r0 = n0 + warp * kRPW;
    const int H = p.H, xrow = x_row(H), nch = H / kVPC, words = H / 8, groups = H / p.qgroup;
    const uint4* wrow[NR];
    const w4::scale_t<F>* srow[NR];
#pragma unroll
    for (int i = 0; i < NR; ++i) {
        const int r = r0 + i % kRPW;
        wrow[i] = reinterpret_cast<const uint4*>((i < kRPW ? p.gate_q[e] : p.up_q[e]) + size_t(r) * words);
        srow[i] = static_cast<const w4::scale_t<F>*>(i < kRPW ? p.gate_qs[e] : p.up_qs[e]) + size_t(r) * groups;
    }
    // x rows of the slot's tokens → shared memory (nb rows; rows past nt are zeros).
    for (int n = 0; n < nb; ++n) {
        const float* src = n < nt ? p.x + size_t(token_of_dest(p, slot_dest_of(p, slot, n))) * H : nullptr;
        for (int c = threadIdx.x; c < H; c += kSmallThreads)
            xs[n * xrow + c / kVPC * (kVPC + kPad) + c % kVPC] = src ? bf16_round(src[c]) : 0.0f;
    }
    __syncthreads();
    float acc[NR][N];
#pragma unroll
    for (int i = 0; i < NR; ++i)
#pragma unroll
        for (int n = 0; n < N; ++n) acc[i][n] = 0.0f;
    for (int c = lane; c < nch; c += 32) {
        uint4 w[NR];
#pragma unroll
        for (int i = 0; i < NR; ++i) w[i] = ld(wrow[i] + c);
        const float* xc = xs + c * (kVPC + kPad);
#pragma unroll
        for (int q = 0; q < 4; ++q) {
            float wf[NR][8], s[NR];
#pragma unroll
            for (int i = 0; i < NR; ++i) {
                w4::unpack8<F>(word(w[i], q), wf[i]);
                s[i] = w4::scale_f32<F>(ld(srow[i] + (kVPC * c + 8 * q) / p.qgroup));
            }
#pragma unroll
            for (int n = 0; n < N; ++n) {
                const float4 a = *reinterpret_cast<const float4*>(xc + n * xrow + 8 * q);
                const float4 b = *reinterpret_cast<const float4*>(xc + n * xrow + 8 * q + 4);
                const float xv[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
#pragma unroll
                for (int i = 0; i < NR; ++i) {
                    float d = 0.0f;
#pragma unroll
                    for (int j = 0; j < 8; ++j) d = fmaf(wf[i][j], xv[j], d);
                    acc[i][n] = fmaf(d, s[i], acc[i][n]);
                }
            }
        }
    }
#pragma unroll
    for (int i = 0; i < NR; ++i)
#pragma unroll
        for (int n = 0; n < N; ++n)
#pragma unroll
            for (int o = 16; o > 0; o >>= 1) acc[i][n] += __shfl_xor_sync(0xffffffffu, acc[i][n], o);
#pragma unroll
    for (int i = 0; i < kRPW; ++i)
#pragma unroll
        for (int n = 0; n < N; ++n) {
            if (lane != i * N + n || n >= nt) continue;
            float g = acc[i][n], u = acc[kRPW + i][n];
            if constexpr (F == w4::Code4::kNvfp4) {  // the matrices' globals, once per dot product
                g *= p.qglobal[3 * e];
                u *= p.qglobal[3 * e + 1];
            }
            const float h = g / (1.0f + expf(-g)) * u;
            p.h[size_t(slot_dest_of(p, slot, n)) * p.ldh + r0 + i] = __float2bfloat16_rn(h);
        }
}

template <w4::Code4 F, int NMAX, bool V2>
__global__ __launch_bounds__(kSmallThreads, 2) void gate_up_kernel(SmallParams p) {
    const int slot = blockIdx.y;
    int e = p.E, nt = p.T;
    if constexpr (V2) {
        if (slot != 0) ptx::griddep_wait();
        ptx::griddep_launch_dependents();
    }
    if (slot != 0) {
        if (slot >= *p.n_slots) return;
        e = p.slot_expert[slot];
        nt = p.slot_count[slot];
    }
    const int Ie = e == p.E ? p.I_shared : p.I;
    const int n0 = blockIdx.x * kSmallRows;
    if (n0 >= Ie) return;
    const int nb = token_bucket(nt);
    float* xs = reinterpret_cast<float*>(ptx::dynamic_smem());
    if (nb == 1 || NMAX == 1) gate_up_rows<F, 1>(p, xs, slot, e, nt, nb, n0);
    else if (nb == 2 || NMAX == 2) gate_up_rows<F, (NMAX < 2 ? NMAX : 2)>(p, xs, slot, e, nt, nb, n0);
    else if (nb == 4 || NMAX == 4) gate_up_rows<F, (NMAX < 4 ? NMAX : 4)>(p, xs, slot, e, nt, nb, n0);
    else gate_up_rows<F, NMAX>(p, xs, slot, e, nt, nb, n0);
}

template <w4::Code4 F, bool V2>
__global__ __launch_bounds__(kSmallThreads) void down_kernel(SmallParams p) {
    constexpr int G = kDownGroup;
    const int t = blockIdx.x, lane = threadIdx.x & 31;
    const int col = blockIdx.y * kSmallCols + (threadIdx.x >> 5);
    const int k = p.k, ndots = k + 1;
    const int Imax = p.I > p.I_shared ? p.I : p.I_shared, max_nch = Imax / 16;
    if constexpr (V2) {
        const int lines = (Imax / 2 + 127) / 128;
        for (int i = lane; i < ndots * lines; i += 32) {
            const int j = i / lines, l = i % lines;
            const bool shared = j == k;
            const int Ie = shared ? p.I_shared : p.I;
            if (l * 128 >= Ie / 2) continue;
            const int e = shared ? p.E : load_cg(p.topk_id + t * k + j);
            ptx::prefetch_l2(reinterpret_cast<const unsigned char*>(p.down_q[e] + size_t(col) * (Ie / 8)) + l * 128);
        }
        ptx::griddep_wait();
    }
    float y = 0.0f;
    for (int j0 = 0; j0 < ndots; j0 += G) {
        const uint2* wrow[G];
        const __nv_bfloat16* hrow[G];
        const w4::scale_t<F>* srow[G];
        int nch[G];
        float glob[G];  // NVFP4: the down matrix's global
#pragma unroll
        for (int g = 0; g < G; ++g) {
            const int j = j0 + g;
            nch[g] = 0;
            wrow[g] = nullptr;
            hrow[g] = nullptr;
            srow[g] = nullptr;
            glob[g] = 1.0f;
            if (j >= ndots) continue;
            const bool shared = j == k;
            const int e = shared ? p.E : V2 ? load_cg(p.topk_id + t * k + j) : p.topk_id[t * k + j];
            const int dest = shared ? p.T * k + t : t * k + j;
            const int Ie = shared ? p.I_shared : p.I;
            nch[g] = Ie / 16;
            wrow[g] = reinterpret_cast<const uint2*>(p.down_q[e] + size_t(col) * (Ie / 8));
            srow[g] = static_cast<const w4::scale_t<F>*>(p.down_qs[e]) + size_t(col) * (Ie / p.qgroup);
            hrow[g] = p.h + size_t(dest) * p.ldh;
            if constexpr (F == w4::Code4::kNvfp4) glob[g] = p.qglobal[3 * e + 2];
        }
        float part[G];
#pragma unroll
        for (int g = 0; g < G; ++g) part[g] = 0.0f;
        for (int c0 = 0; c0 < max_nch; c0 += 32) {
            const int c = c0 + lane;
            uint2 w[G];
            uint4 h0[G], h1[G];
#pragma unroll
            for (int g = 0; g < G; ++g) {
                const bool ok = c < nch[g];
                w[g] = ok ? ld(wrow[g] + c) : make_uint2(0, 0);
                h0[g] = ok ? *reinterpret_cast<const uint4*>(hrow[g] + 16 * c) : make_uint4(0, 0, 0, 0);
                h1[g] = ok ? *reinterpret_cast<const uint4*>(hrow[g] + 16 * c + 8) : make_uint4(0, 0, 0, 0);
            }
#pragma unroll
            for (int g = 0; g < G; ++g) {
                if (c >= nch[g]) continue;
#pragma unroll
                for (int half = 0; half < 2; ++half) {
                    const float d = down_word_dot<F>(half == 0 ? w[g].x : w[g].y, half == 0 ? h0[g] : h1[g]);
                    const float s = w4::scale_f32<F>(ld(srow[g] + (16 * c + 8 * half) / p.qgroup));
                    part[g] = fmaf(d, s, part[g]);
                }
            }
        }
#pragma unroll
        for (int g = 0; g < G; ++g) {
#pragma unroll
            for (int o = 16; o > 0; o >>= 1) part[g] += __shfl_xor_sync(0xffffffffu, part[g], o);
            if constexpr (F == w4::Code4::kNvfp4) part[g] *= glob[g];
            const int j = j0 + g;
            const float d = expert_out(part[g], p.eout_bf16);
            if (j < k) y += (V2 ? load_cg(p.topk_w + t * k + j) : p.topk_w[t * k + j]) * d;
            else if (j == k) y += 1.0f / (1.0f + expf(-(V2 ? load_cg(p.shared_gate_logit + t) : p.shared_gate_logit[t]))) * d;
        }
    }
    if (lane == 0) p.y[size_t(t) * p.H + col] = y;
}

constexpr int kSlotBatch = 9;  // slots whose loads are in flight together (a one-token step's k + 1)

template <w4::Code4 F, int CPL, bool V2>
__global__ __launch_bounds__(kSmallThreads, 2) void down_slots_kernel(SmallParams p) {
    const DownSlotsLayout& L = p.down_slots;
    unsigned char* sm = ptx::dynamic_smem();
    int* s_expert = reinterpret_cast<int*>(sm + L.off_expert);                        // [max_slots]
    int* s_count = reinterpret_cast<int*>(sm + L.off_count);                          // [max_slots]
    int* s_dest = reinterpret_cast<int*>(sm + L.off_dest);                            // [max_slots][T]
    const uint32_t** s_wptr = reinterpret_cast<const uint32_t**>(sm + L.off_wptr);    // [max_slots] codes
    using ST = w4::scale_t<F>;
    const ST** s_sptr = reinterpret_cast<const ST**>(sm + L.off_sptr);                // [max_slots] scales
    float* s_glob = reinterpret_cast<float*>(sm + L.off_scale);                       // [max_slots] (NVFP4)
    float* s_topw = reinterpret_cast<float*>(sm + L.off_topw);                        // [T·k]
    float* s_sg = reinterpret_cast<float*>(sm + L.off_sg);                            // [T]
    float* s_dots = reinterpret_cast<float*>(sm + L.off_dots);                        // [warps][T·(k + 1)]
    __nv_bfloat16* s_h = reinterpret_cast<__nv_bfloat16*>(sm + L.off_h);              // [T·(k + 1)][ldh]
    __shared__ int s_n;

    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int T = p.T, k = p.k, E = p.E, ndots = T * (k + 1);
    const int col = blockIdx.x * kSmallCols + warp;

    // 1. The plan, the routing weights and the shared-expert gates (complete when this grid starts).
    const int n = slots::stage_plan(p, L, s_expert, s_count, s_dest, s_topw, s_sg, &s_n);
    // 2. Each slot's down codes and scales (and NVFP4 global).
    for (int i = tid; i < n; i += kSmallThreads) {
        const int e = s_expert[i];
        s_wptr[i] = p.down_q[e];
        s_sptr[i] = static_cast<const ST*>(p.down_qs[e]);
        s_glob[i] = F == w4::Code4::kNvfp4 ? p.qglobal[3 * e + 2] : 1.0f;
    }
    __syncthreads();
    auto width_of = [&](int e) { return e == E ? p.I_shared : p.I; };
    // A batch's pieces (c = lane + 32u of the 16-code pieces of down_e[col, :]) and their two scales.
    uint2 w[kSlotBatch][CPL];
    ST sc[kSlotBatch][CPL][2];
    auto load_batch = [&](int s0) {
#pragma unroll
        for (int b = 0; b < kSlotBatch; ++b) {
            const int s = s0 + b;
            const int Ie = s < n ? width_of(s_expert[s]) : 0, nch = Ie / 16;
            const uint2* wrow = s < n ? reinterpret_cast<const uint2*>(s_wptr[s] + size_t(col) * (Ie / 8)) : nullptr;
            const ST* srow = s < n ? s_sptr[s] + size_t(col) * (Ie / p.qgroup) : nullptr;
#pragma unroll
            for (int u = 0; u < CPL; ++u) {
                const int c = lane + 32 * u;
                const bool ok = c < nch;
                w[b][u] = ok ? ld(wrow + c) : make_uint2(0, 0);
                sc[b][u][0] = ok ? ld(srow + (16 * c) / p.qgroup) : ST(0);
                sc[b][u][1] = ok ? ld(srow + (16 * c + 8) / p.qgroup) : ST(0);
            }
        }
    };
    load_batch(0);  // before griddep_wait: the plan is complete, only h comes from gate_up
    if constexpr (V2) ptx::griddep_wait();  // gate_up's h
    slots::stage_h(p, s_h);
    __syncthreads();

    // 3. The dots of every slot's tokens, a batch of slots at a time.
    float* dots = s_dots + warp * ndots;
    for (int s0 = 0; s0 < n; s0 += kSlotBatch) {
        if (s0 > 0) load_batch(s0);
#pragma unroll
        for (int b = 0; b < kSlotBatch; ++b) {
            const int s = s0 + b;
            if (s >= n) break;
            const int nch = width_of(s_expert[s]) / 16, cnt = s_count[s];
            for (int m = 0; m < cnt; ++m) {
                const int dest = s_dest[s * T + m];
                const __nv_bfloat16* hrow = s_h + size_t(dest) * p.ldh;
                float part = 0.0f;
#pragma unroll
                for (int u = 0; u < CPL; ++u) {
                    const int c = lane + 32 * u;
                    if (c >= nch) continue;
#pragma unroll
                    for (int half = 0; half < 2; ++half) {
                        const uint4 hv = *reinterpret_cast<const uint4*>(hrow + 16 * c + 8 * half);
                        const float d = down_word_dot<F>(half == 0 ? w[b][u].x : w[b][u].y, hv);
                        part = fmaf(d, w4::scale_f32<F>(sc[b][u][half]), part);
                    }
                }
#pragma unroll
                for (int o = 16; o > 0; o >>= 1) part += __shfl_xor_sync(0xffffffffu, part, o);
                if constexpr (F == w4::Code4::kNvfp4) part *= s_glob[s];
                if (lane == 0) dots[dest] = expert_out(part, p.eout_bf16);
            }
        }
    }
    __syncwarp();
    // 4. y[t][col]: the routed dots in j order, then the gated shared expert.
    slots::combine_column(p, s_topw, s_sg, dots, col, lane);
}

}  // namespace small_int4

#if !defined(QS_MOE_EMULATE)
namespace {

template <w4::Code4 F, int NMAX, bool V2>
void launch_int4_gate_up(const SmallPlan& pl, cudaStream_t stream) {
    allow_dynamic_smem<small_int4::gate_up_kernel<F, NMAX, V2>>(pl.gate_up_smem);
    if constexpr (V2) {
        QS_CUDA_CHECK(ptx::launch_kernel_pdl(small_int4::gate_up_kernel<F, NMAX, V2>, pl.gate_up_grid,
                                             dim3(kSmallThreads), pl.gate_up_smem, stream, pl.p));
    } else {
        small_int4::gate_up_kernel<F, NMAX, V2><<<pl.gate_up_grid, kSmallThreads, pl.gate_up_smem, stream>>>(pl.p);
        QS_CUDA_CHECK_LAUNCH();
    }
}

template <w4::Code4 F, bool V2>
void launch_int4_stages_v(const SmallPlan& pl, cudaStream_t stream, cudaEvent_t* ev) {
    if (pl.gate_up_mma) launch_small_int4_gate_up_mma(pl, stream);
    else switch (pl.nmax) {
        case 1: launch_int4_gate_up<F, 1, V2>(pl, stream); break;
        case 2: launch_int4_gate_up<F, 2, V2>(pl, stream); break;
        case 4: launch_int4_gate_up<F, 4, V2>(pl, stream); break;
        default: launch_int4_gate_up<F, 8, V2>(pl, stream); break;
    }
    if (ev) QS_CUDA_CHECK(cudaEventRecord(ev[3], stream));
    if (pl.down_version == 2) {
        const size_t bytes = size_t(pl.p.down_slots.bytes);
        auto* kernel = pl.p.down_slots.cpl == 1 ? small_int4::down_slots_kernel<F, 1, V2> : small_int4::down_slots_kernel<F, 2, V2>;
        if (pl.p.down_slots.cpl == 1) allow_dynamic_smem<small_int4::down_slots_kernel<F, 1, V2>>(bytes);
        else allow_dynamic_smem<small_int4::down_slots_kernel<F, 2, V2>>(bytes);
        if constexpr (V2) {
            QS_CUDA_CHECK(ptx::launch_kernel_pdl(kernel, pl.down_grid, dim3(kSmallThreads), bytes, stream, pl.p));
        } else {
            kernel<<<pl.down_grid, kSmallThreads, bytes, stream>>>(pl.p);
            QS_CUDA_CHECK_LAUNCH();
        }
        return;
    }
    if constexpr (V2) {
        QS_CUDA_CHECK(ptx::launch_kernel_pdl(small_int4::down_kernel<F, V2>, pl.down_grid, dim3(kSmallThreads), 0,
                                             stream, pl.p));
    } else {
        small_int4::down_kernel<F, V2><<<pl.down_grid, kSmallThreads, 0, stream>>>(pl.p);
        QS_CUDA_CHECK_LAUNCH();
    }
}

template <w4::Code4 F>
void launch_stages_f(const SmallPlan& pl, cudaStream_t stream, cudaEvent_t* ev) {
    if (pl.version == 2) launch_int4_stages_v<F, true>(pl, stream, ev);
    else launch_int4_stages_v<F, false>(pl, stream, ev);
}

}  // namespace

void launch_small_int4_stages(const SmallPlan& pl, cudaStream_t stream, cudaEvent_t* ev) {
    if (pl.nvfp4) launch_stages_f<w4::Code4::kNvfp4>(pl, stream, ev);
    else launch_stages_f<w4::Code4::kInt4>(pl, stream, ev);
}
#endif

}  // namespace qs::cuda::moe

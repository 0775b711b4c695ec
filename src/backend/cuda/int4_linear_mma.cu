// INT4 W4A16 (and NVFP4) small-rows linears, version 3 (see int4_linear_kernels.h): 1..8 rows on tensor cores.
//
// Version 2 (int4_linear_kernels.cu) unpacks every code to fp32 and runs 8 FMAs per 8-code word and
// token, re-rounding x to bf16 in every warp: ~55 instructions per 4 weight bytes at one row, so at
// half of FP8's bytes its launches took longer than FP8's (H100 trace, session 39: 14.7 µs a launch
// on average against ~9). Here a warp multiplies 16 weight rows by the T rows of x with mma.sync
// m16n8k16 (bf16 operands, fp32 accumulation): a code pair becomes a bf16x2 operand in three
// instructions (int4_unpack.cuh: bf16x2_pair, exact), x is rounded to bf16 once per block into
// shared memory, every product is exact, and only the order of the fp32 sums differs from version 2.
//  - A block of 8 warps owns 16 output rows (each part's rows padded to a multiple of 16 in the parts
//    table: padding rows load zeros and store nothing); warp w takes the 128-column groups
//    kb = w, w + 8, ... (in / 1,024 of them). Per group a lane (g = lane / 4, q = lane % 4) loads 16
//    bytes of row g and of row g + 8: the 32 codes of columns 128 kb + 32 q .. + 31 (a row's 64 bytes
//    of the group in one quarter-warp), and the two rows' group scales; every load of a block is
//    issued before x is staged, so a block costs one DRAM round trip.
//  - The MMA's k slots are a permutation of the columns (a dot product does not care which, as long
//    as A and B agree): for word j (codes 8j .. 8j + 7 of the lane's 32) MMA 0 puts codes (0, 4) in
//    slots 2q, 2q + 1 and (1, 5) in 2q + 8, 2q + 9, MMA 1 codes (2, 6) and (3, 7) (bf16x2_pair's
//    pairs s = 0..3). x is staged with each 8-column word reordered to columns (0, 4, 1, 5, 2, 6, 3,
//    7), so the B operands of both MMAs are one 16-byte shared load of token g's row.
//  - Per group the 8 MMAs start from zero, then acc += D · scale of the row (the group's bf16 scale:
//    group must be a multiple of 128 so that one scale covers an MMA's 128 columns); the 8 warps'
//    accumulators are summed in warp order through shared memory (deterministic). A row's result
//    does not depend on T (tokens are the MMA's independent columns) or on the launch's other rows.
// NVFP4 (Code4::kNvfp4, group 16): word j of a lane's chunk is half of one 16-column block, so its
// two code pairs per MMA are multiplied by that block's scale before the MMA (w4::nvfp4_operand:
// exact, an E2M1 value times an E4M3 scale has at most 6 significant bits; the operand carries 2^−8;
// a lane's two block scale bytes are one 2-byte load),
// one accumulator runs over all groups, and each output is multiplied by its matrix's fp32 global
// (times 2^8) once. The products are version 2's (code · x · scale, exact), the sums in another order.
// With the output norm (POST > 0) every block then calls output_norm_last_block. Also compiles as
// host C++ for the SIMT emulation (bench/kernels/emu/int4_emu.cpp).
#include <algorithm>

#include <cuda_bf16.h>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/device_limits.h"
#include "backend/cuda/int4_linear_kernels.h"
#include "backend/cuda/int4_linear_parts.cuh"
#include "backend/cuda/int4_unpack.cuh"
#include "backend/cuda/output_norm_last_block.cuh"
#include "backend/cuda/ptx_helpers.cuh"  // the emulation shim (bench/kernels/emu) has its own
#include "core/check.h"

namespace qs::cuda {
namespace {

constexpr int kMmaWarps = 8;
static_assert(kMmaWarps == kNormWarps, "the output norm maps one element a thread over blocks of 8 warps");
constexpr int kGroupRows = 16;  // output rows a block computes at once (the MMA's M)
constexpr int kXPad = 8;        // bf16 values after each staged row of x (16 bytes: spreads the rows' banks)

using int4_parts::Int4Parts;

__device__ __forceinline__ uint32_t word_of(const uint4& v, int j) { return j == 0 ? v.x : j == 1 ? v.y : j == 2 ? v.z : v.w; }

// Two floats rounded to bf16 (round to nearest even) as one bf16x2 register, a in the low half.
__device__ __forceinline__ uint32_t bf16x2_of(float a, float b) {
    const uint32_t lo = __bfloat16_as_ushort(__float2bfloat16_rn(a)), hi = __bfloat16_as_ushort(__float2bfloat16_rn(b));
    return lo | (hi << 16);
}

// KS = column groups a warp takes at most (ceil(in / 1,024)); POST = out / 256 with the output norm.
template <w4::Code4 F, int T, int KS, int POST>
__global__ __launch_bounds__(kMmaWarps * 32, 2) void int4_linear_mma_kernel(const Int4Parts a, int in, int group,
                                                                           const float* __restrict__ x,
                                                                           const SmallLinearOutputNorm post) {
    uint4* xs = reinterpret_cast<uint4*>(ptx::dynamic_smem());  // [T][(in + kXPad) / 8] words, permuted
    __shared__ float partial[kMmaWarps][kGroupRows][T];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, q = lane & 3;
    const int blocks_k = in / 128, groups = a.rows / kGroupRows, words = in / 8, sgroups = in / group;
    const int xrow = (in + kXPad) / 8;  // a staged row's 16-byte words

    bool staged = false;
    for (int rg = blockIdx.x; rg < groups; rg += gridDim.x) {
        const int4_parts::PartRow gr = int4_parts::part_row(a, rg * kGroupRows);
        const bool has_g = gr.o + g < gr.out, has_g8 = gr.o + g + 8 < gr.out;  // else padding: zeros
        const uint4* row_g = reinterpret_cast<const uint4*>(gr.codes + size_t(has_g ? gr.o + g : 0) * words);
        const uint4* row_g8 = reinterpret_cast<const uint4*>(gr.codes + size_t(has_g8 ? gr.o + g + 8 : 0) * words);
        const w4::scale_t<F>* s_g = static_cast<const w4::scale_t<F>*>(gr.scales) + size_t(has_g ? gr.o + g : 0) * sgroups;
        const w4::scale_t<F>* s_g8 = static_cast<const w4::scale_t<F>*>(gr.scales) + size_t(has_g8 ? gr.o + g + 8 : 0) * sgroups;
        uint4 wa[KS], wb[KS];
        uint32_t sa[KS], sb[KS];  // INT4: the group's bf16 scale; NVFP4: the chunk's two block scale bytes
#pragma unroll
        for (int i = 0; i < KS; ++i) {
            const int kb = warp + kMmaWarps * i;
            wa[i] = wb[i] = make_uint4(0, 0, 0, 0);
            sa[i] = sb[i] = 0;
            if (kb < blocks_k) {
                const int c = kb * 4 + q;  // the lane's 16-byte chunk of the row (32 codes)
                if constexpr (F == w4::Code4::kNvfp4) {
                    const int si = kb * 8 + 2 * q;  // blocks of columns 128 kb + 32 q .. + 15, + 16 .. + 31
                    if (has_g) wa[i] = __ldg(row_g + c), sa[i] = __ldg(reinterpret_cast<const uint16_t*>(s_g + si));
                    if (has_g8) wb[i] = __ldg(row_g8 + c), sb[i] = __ldg(reinterpret_cast<const uint16_t*>(s_g8 + si));
                } else {
                    const int si = kb * 128 / group;  // the group's scale
                    if (has_g) wa[i] = __ldg(row_g + c), sa[i] = __ldg(s_g + si);
                    if (has_g8) wb[i] = __ldg(row_g8 + c), sb[i] = __ldg(s_g8 + si);
                }
            }
        }
        if (!staged) {
            // 1. x → bf16 (round to nearest even, as version 2 rounds it), each 8-column word stored as
            //    columns (0, 4, 1, 5, 2, 6, 3, 7).
            for (int i = threadIdx.x; i < T * words; i += kMmaWarps * 32) {
                const int t = i / words, w = i % words;
                const float4* src = reinterpret_cast<const float4*>(x + size_t(t) * in + 8 * w);
                const float4 lo = src[0], hi = src[1];
                xs[t * xrow + w] = make_uint4(bf16x2_of(lo.x, hi.x), bf16x2_of(lo.y, hi.y), bf16x2_of(lo.z, hi.z),
                                              bf16x2_of(lo.w, hi.w));
            }
            __syncthreads();
            staged = true;
        }

        // 2. The warp's column groups on tensor cores. D: rows g / g + 8, tokens 2q / 2q + 1.
        float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
        for (int i = 0; i < KS; ++i) {
            const int kb = warp + kMmaWarps * i;
            if (kb >= blocks_k) break;
            float d[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
            for (int j = 0; j < 4; ++j) {
                // B column n = g: token g's columns 128 kb + 32 q + 8 j .. + 7, permuted.
                const uint4 xb = g < T ? xs[g * xrow + kb * 16 + q * 4 + j] : make_uint4(0, 0, 0, 0);
                uint32_t a0[4], a1[4];
                w4::mma_word_operands<F>(word_of(wa[i], j), word_of(wb[i], j), sa[i], sb[i], j, a0, a1);
                ptx::mma_16816_bf16(d, a0, xb.x, xb.y);
                ptx::mma_16816_bf16(d, a1, xb.z, xb.w);
            }
            if constexpr (F == w4::Code4::kNvfp4) {
#pragma unroll
                for (int r = 0; r < 4; ++r) acc[r] += d[r];
            } else {
                const float scale_g = w4::scale_f32<F>(uint16_t(sa[i])), scale_g8 = w4::scale_f32<F>(uint16_t(sb[i]));
                acc[0] = fmaf(d[0], scale_g, acc[0]);
                acc[1] = fmaf(d[1], scale_g, acc[1]);
                acc[2] = fmaf(d[2], scale_g8, acc[2]);
                acc[3] = fmaf(d[3], scale_g8, acc[3]);
            }
        }
        // 3. The warps' sums in warp order.
        if (2 * q < T) partial[warp][g][2 * q] = acc[0], partial[warp][g + 8][2 * q] = acc[2];
        if (2 * q + 1 < T) partial[warp][g][2 * q + 1] = acc[1], partial[warp][g + 8][2 * q + 1] = acc[3];
        __syncthreads();
        if (threadIdx.x < kGroupRows * T) {
            const int r = threadIdx.x % kGroupRows, t = threadIdx.x / kGroupRows;
            float y = partial[0][r][t];
#pragma unroll
            for (int w = 1; w < kMmaWarps; ++w) y += partial[w][r][t];
            // The matrix's global, once per output (times 2^8: the operands carry 2^−8, w4::nvfp4_operand).
            if constexpr (F == w4::Code4::kNvfp4) y *= gr.global * w4::kNvfp4FoldedUnscale;
            if (gr.o + r < gr.out) gr.y[size_t(t) * gr.out + gr.o + r] = y;
        }
        __syncthreads();  // partial is rewritten by the next group
    }
    if constexpr (POST > 0) output_norm_last_block<T, POST>(post, a.y[0], a.out[0]);
}

size_t mma_smem_bytes(int64_t T, int64_t in) { return size_t(T * (in + kXPad)) * 2; }

template <w4::Code4 F, int T, int KS, int POST>
void launch_ks(const Int4Parts& a, int in, int group, const float* x, const SmallLinearOutputNorm& post,
               cudaStream_t stream) {
    auto* kernel = int4_linear_mma_kernel<F, T, KS, POST>;
    allow_dynamic_smem<int4_linear_mma_kernel<F, T, KS, POST>>(mma_smem_bytes(T, in));
    ptx::launch_kernel(kernel, dim3(unsigned(a.rows / kGroupRows)), dim3(kMmaWarps * 32), mma_smem_bytes(T, in), stream,
                       a, in, group, x, post);
    QS_CUDA_CHECK_LAUNCH();
}

template <w4::Code4 F, int T, int KS>
void launch_post(const Int4Parts& a, int in, int group, const float* x, const SmallLinearOutputNorm* post,
                 cudaStream_t stream) {
    if (post == nullptr) launch_ks<F, T, KS, 0>(a, in, group, x, SmallLinearOutputNorm{}, stream);
    else if (a.out[0] == 2048) launch_ks<F, T, KS, 8>(a, in, group, x, *post, stream);
    else launch_ks<F, T, KS, 16>(a, in, group, x, *post, stream);
}

template <w4::Code4 F, int T>
void launch_t(const Int4Parts& a, int in, int group, const float* x, const SmallLinearOutputNorm* post,
              cudaStream_t stream) {
    const int ks = (in / 128 + kMmaWarps - 1) / kMmaWarps;
    if (ks <= 1) launch_post<F, T, 1>(a, in, group, x, post, stream);
    else if (ks == 2) launch_post<F, T, 2>(a, in, group, x, post, stream);
    else launch_post<F, T, 4>(a, in, group, x, post, stream);
}

template <w4::Code4 F>
void launch_f(const Int4Parts& a, int64_t T, int in, int group, const float* x, const SmallLinearOutputNorm* post,
              cudaStream_t stream) {
    switch (T) {
        case 1: launch_t<F, 1>(a, in, group, x, post, stream); break;
        case 2: launch_t<F, 2>(a, in, group, x, post, stream); break;
        case 3: launch_t<F, 3>(a, in, group, x, post, stream); break;
        case 4: launch_t<F, 4>(a, in, group, x, post, stream); break;
        case 5: launch_t<F, 5>(a, in, group, x, post, stream); break;
        case 6: launch_t<F, 6>(a, in, group, x, post, stream); break;
        case 7: launch_t<F, 7>(a, in, group, x, post, stream); break;
        default: launch_t<F, 8>(a, in, group, x, post, stream); break;
    }
}

}  // namespace

bool int4_linear_mma_supports(bool nvfp4, int64_t T, int64_t in, int64_t group, std::span<const Int4LinearPart> parts,
                              const float* x) {
    const bool group_ok = nvfp4 ? group == kNvfp4LinearGroup : group > 0 && group % 128 == 0 && in % group == 0;
    if (T < 1 || T > kInt4LinearMaxRows || in < 128 || in % 128 != 0 || in > 4096 || !group_ok || parts.empty() ||
        parts.size() > size_t(kInt4LinearMaxParts) || reinterpret_cast<uintptr_t>(x) % 16 != 0)
        return false;
    for (const Int4LinearPart& p : parts)  // NVFP4 reads a lane's two block scale bytes as one 2-byte word
        if (p.out <= 0 || reinterpret_cast<uintptr_t>(p.codes) % 16 != 0 || reinterpret_cast<uintptr_t>(p.scales) % 2 != 0)
            return false;
    return true;
}

void launch_int4_linears_mma(bool nvfp4, std::span<const Int4LinearPart> parts, int64_t in, int64_t group,
                             const float* x, int64_t T, cudaStream_t stream, const SmallLinearOutputNorm* post) {
    QS_CHECK_MSG(int4_linear_mma_supports(nvfp4, T, in, group, parts, x),
                 "launch_int4_linears_mma: 1-8 rows, in a multiple of 128 up to 4,096, an INT4 group multiple of 128 "
                 "dividing in (NVFP4: 16), 1-4 weights, 16-byte aligned codes, 2-byte aligned scales");
    const Int4Parts a = int4_parts::make_parts(parts, nvfp4, kGroupRows, "launch_int4_linears_mma");
    int4_parts::check_output_norm(parts, T, post, "launch_int4_linears_mma");
    if (nvfp4) launch_f<w4::Code4::kNvfp4>(a, T, int(in), int(group), x, post, stream);
    else launch_f<w4::Code4::kInt4>(a, T, int(in), int(group), x, post, stream);
}

}  // namespace qs::cuda

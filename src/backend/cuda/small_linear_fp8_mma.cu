// FP8 small-rows linear, version 3 (see small_linear_kernels.h): 1..4 rows on tensor cores.
//
// Version 2 multiplies in fp32 FMAs: per 16-byte weight chunk a lane converts 16 e4m3 codes to
// fp32 and runs 16 FMAs and 4 shared loads per row, ~145 instructions a chunk at one row (Nsight
// Compute: issue slots 50 % busy on a kernel that should wait on DRAM; every extra row adds ~30 %,
// which is most of what a two-row MTP verify step pays over one row in its dense linears). Here a
// warp multiplies 16 weight rows by the T rows of x with mma.sync m16n8k16 (f16 operands, fp32
// accumulation): e4m3 codes convert to f16 exactly (cvt.rn.f16x2.e4m3x2, two per instruction), x's
// e4m3 codes too, so every product is exact as in version 2 and only the order of the fp32 sums
// differs; T ≤ 4 rows use 4 of the MMA's 8 columns, so a second row costs nothing extra.
//  - A block of 8 warps owns 16 output features (a row group; each part's rows are padded to a
//    multiple of 16, so a group lies in one part and one 128-row scale block; padding rows load
//    zeros and store nothing, so any row count takes this kernel); warp w takes the
//    128-column scale blocks kb = w, w + 8, ... (in / 1,024 of them). Per scale block a lane loads
//    16 bytes of row g = lane / 4 and of row g + 8 at columns 128 kb + 16 q and 128 kb + 64 + 16 q
//    (q = lane % 4): each row's 128 bytes come in one warp instruction pair, and all of a block's
//    loads (16 rows × in bytes) are issued before step 1, so a block costs one DRAM round trip.
//  - The MMA's k slots are a permutation of the columns (a dot product does not care which, as
//    long as A and B agree): in MMA (h, j), lane (g, q)'s slots 2q, 2q + 1 hold columns c, c + 1
//    and slots 8 + 2q, 8 + 2q + 1 columns c + 2, c + 3 with c = 128 kb + 64 h + 16 q + 4 j, i.e.
//    bytes 4j .. 4j + 3 of its 16-byte load; its B slots (token n = g) are x[n][c .. c + 3], four
//    consecutive f16 in shared memory.
//  - Per scale block the 8 MMAs start from zero, then acc += (w_scale · x_scale) · D, version 2's
//    form; the 8 warps' accumulators are summed in warp order through shared memory (deterministic).
// Step 1 is version 2's (small_fp8::quantise_16: launch_quant_fp8_rows128's operations), storing
// the codes as f16 in natural column order.
#include <algorithm>

#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/device_limits.h"
#include "backend/cuda/ptx_helpers.cuh"  // the emulation shim (bench/kernels/emu) has its own
#include "backend/cuda/small_linear_fp8_common.cuh"
#include "backend/cuda/small_linear_fp8_norms.cuh"
#include "backend/cuda/small_linear_kernels.h"
#include "core/check.h"

namespace qs::cuda {
namespace {

using namespace small_fp8;

constexpr int kMmaWarps = 8;
static_assert(kMmaWarps == kNormWarps, "the fused norms map one element a thread over blocks of 8 warps");
constexpr int kGroupRows = 16;  // output features a block computes at once (the MMA's M)

__device__ __forceinline__ uint32_t word_of(const uint4& v, int j) { return j == 0 ? v.x : j == 1 ? v.y : j == 2 ? v.z : v.w; }

// Two e4m3 codes (the low and high byte of `pair`) → an f16x2 register, exactly.
__device__ __forceinline__ uint32_t e4m3x2_to_f16x2(uint32_t pair) {
    const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(__nv_fp8x2_storage_t(pair & 0xffffu), __NV_E4M3);
    return uint32_t(h.x) | (uint32_t(h.y) << 16);
}

// KS = scale blocks a warp takes at most (ceil(in / 1,024)); PER = in / 256 with the input norm
// (0: none), POST = out / 256 with the output norm (0: none).
template <int T, int KS, int PER, int POST>
__global__ __launch_bounds__(kMmaWarps * 32, 2) void small_linear_fp8_mma_kernel(const Fp8Parts a, int in,
                                                                             const float* __restrict__ x,
                                                                             const SmallLinearInputNorm norm,
                                                                             const SmallLinearOutputNorm post) {
    __half* xh = reinterpret_cast<__half*>(ptx::dynamic_smem());                 // [T][in] codes as f16
    float* xscale = reinterpret_cast<float*>(ptx::dynamic_smem() + size_t(T) * in * 2);  // [T][in / 128]
    __shared__ float partial[kMmaWarps][kGroupRows][T];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, q = lane & 3;
    const int blocks_k = in / 128, groups = a.rows / kGroupRows;

    bool quantised = false;
    for (int rg = blockIdx.x; rg < groups; rg += gridDim.x) {
        const PartRow pr = part_row(a, rg * kGroupRows);
        const uint8_t* row_g = pr.w + size_t(pr.o + g) * in;
        const uint8_t* row_g8 = row_g + size_t(8) * in;
        const bool has_g = pr.o + g < pr.out, has_g8 = pr.o + g + 8 < pr.out;  // else padding: zeros
        uint4 wa[KS][2], wb[KS][2];
        float ws[KS];
#pragma unroll
        for (int i = 0; i < KS; ++i) {
            const int kb = warp + kMmaWarps * i;
            wa[i][0] = wa[i][1] = wb[i][0] = wb[i][1] = make_uint4(0, 0, 0, 0);
            if (kb < blocks_k) {
                const int c = kb * 128 + 16 * q;
                if (has_g) {
                    wa[i][0] = __ldg(reinterpret_cast<const uint4*>(row_g + c));
                    wa[i][1] = __ldg(reinterpret_cast<const uint4*>(row_g + c + 64));
                }
                if (has_g8) {
                    wb[i][0] = __ldg(reinterpret_cast<const uint4*>(row_g8 + c));
                    wb[i][1] = __ldg(reinterpret_cast<const uint4*>(row_g8 + c + 64));
                }
                ws[i] = __ldg(pr.scale_inv + size_t(pr.o / 128) * blocks_k + kb);
            }
        }
        if (!quantised) {
            // 1. x (or h, with the input norm) → f16 codes and scales (without the norm: 8 lanes per
            //    128-column group, 4 groups per warp).
            if constexpr (PER > 0) {
                norm_quantise_x<T, PER>(x, norm, in, xscale, [&](int t, int c, float code) {
                    xh[size_t(t) * in + c] = __float2half_rn(code);  // an e4m3 value: exact
                });
            } else for (int gi = warp * 4 + (lane >> 3); gi < T * blocks_k; gi += kMmaWarps * 4) {
                const int t = gi / blocks_k, grp = gi % blocks_k, sub = lane & 7;
                const int k = grp * 128 + sub * 16;
                float v[16];
                const float scale = quantise_16(x + size_t(t) * in + k, v);
                uint32_t hv[8];
#pragma unroll
                for (int j = 0; j < 8; ++j) {
                    const __half2 h2 = __floats2half2_rn(v[2 * j], v[2 * j + 1]);  // e4m3 values: exact
                    hv[j] = *reinterpret_cast<const uint32_t*>(&h2);
                }
                uint4* dst = reinterpret_cast<uint4*>(xh + size_t(t) * in + k);
                dst[0] = make_uint4(hv[0], hv[1], hv[2], hv[3]);
                dst[1] = make_uint4(hv[4], hv[5], hv[6], hv[7]);
                if (sub == 0) xscale[t * blocks_k + grp] = scale;
            }
            __syncthreads();
            quantised = true;
        }

        // 2. The warp's scale blocks on tensor cores. D: rows g / g + 8, tokens 2q / 2q + 1.
        float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
        for (int i = 0; i < KS; ++i) {
            const int kb = warp + kMmaWarps * i;
            if (kb >= blocks_k) break;
            float d[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                uint4 xb0 = make_uint4(0, 0, 0, 0), xb1 = make_uint4(0, 0, 0, 0);
                if (g < T) {  // B column n = g: x row g's 16 values from column 128 kb + 64 h + 16 q
                    const uint4* src = reinterpret_cast<const uint4*>(xh + size_t(g) * in + kb * 128 + 64 * h + 16 * q);
                    xb0 = src[0];
                    xb1 = src[1];
                }
#pragma unroll
                for (int j = 0; j < 4; ++j) {
                    const uint32_t wg = word_of(wa[i][h], j), wg8 = word_of(wb[i][h], j);
                    const uint32_t af[4] = {e4m3x2_to_f16x2(wg), e4m3x2_to_f16x2(wg8), e4m3x2_to_f16x2(wg >> 16),
                                            e4m3x2_to_f16x2(wg8 >> 16)};
                    const uint4& xb = j < 2 ? xb0 : xb1;
                    const uint32_t b0 = word_of(xb, (2 * j) & 3), b1 = word_of(xb, (2 * j + 1) & 3);
                    ptx::mma_16816_f16(d, af, b0, b1);
                }
            }
            const float xs0 = 2 * q < T ? xscale[(2 * q) * blocks_k + kb] : 0.0f;
            const float xs1 = 2 * q + 1 < T ? xscale[(2 * q + 1) * blocks_k + kb] : 0.0f;
            acc[0] = fmaf(ws[i] * xs0, d[0], acc[0]);
            acc[1] = fmaf(ws[i] * xs1, d[1], acc[1]);
            acc[2] = fmaf(ws[i] * xs0, d[2], acc[2]);
            acc[3] = fmaf(ws[i] * xs1, d[3], acc[3]);
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
            if (pr.o + r < pr.out) pr.y[size_t(t) * pr.out + pr.o + r] = y;
        }
        __syncthreads();  // partial is rewritten by the next group
    }
    if constexpr (POST > 0) output_norm_last_block<T, POST>(post, a.y[0], a.out[0]);
}

size_t mma_smem_bytes(int64_t T, int64_t in) { return size_t(T * in) * 2 + size_t(T * (in / 128)) * 4; }

template <int T, int KS, int PER, int POST>
void launch_ks(const Fp8Parts& a, int in, const float* x, int blocks_per_sm, const SmallLinearInputNorm& norm,
               const SmallLinearOutputNorm& post, cudaStream_t stream) {
    auto* kernel = small_linear_fp8_mma_kernel<T, KS, PER, POST>;
    allow_dynamic_smem<small_linear_fp8_mma_kernel<T, KS, PER, POST>>(mma_smem_bytes(T, in));
    const int64_t groups = a.rows / kGroupRows;
    const int64_t cap = blocks_per_sm > 0 ? int64_t(sm_count()) * blocks_per_sm : groups;
    ptx::launch_kernel(kernel, dim3(unsigned(std::min(groups, cap))), dim3(kMmaWarps * 32), mma_smem_bytes(T, in),
                       stream, a, in, x, norm, post);
    QS_CUDA_CHECK_LAUNCH();
}

// The instance for `in` (KS) and the norms (PER, POST): without norms every KS; the input norm has
// in = 2,048 or 4,096 (KS 2 or 4, PER = in / 256); the output norm in and out of 2,048 or 4,096.
template <int T>
void launch_t(const Fp8Parts& a, int in, const float* x, int blocks_per_sm, const SmallLinearInputNorm* norm,
              const SmallLinearOutputNorm* post, cudaStream_t stream) {
    const SmallLinearInputNorm no_norm;
    const SmallLinearOutputNorm no_post;
    if (norm != nullptr) {
        if (in == 2048) launch_ks<T, 2, 8, 0>(a, in, x, blocks_per_sm, *norm, no_post, stream);
        else launch_ks<T, 4, 16, 0>(a, in, x, blocks_per_sm, *norm, no_post, stream);
        return;
    }
    if (post != nullptr) {
        const bool wide_in = in == 4096, wide_out = a.rows == 4096;
        if (wide_in && wide_out) launch_ks<T, 4, 0, 16>(a, in, x, blocks_per_sm, no_norm, *post, stream);
        else if (wide_in) launch_ks<T, 4, 0, 8>(a, in, x, blocks_per_sm, no_norm, *post, stream);
        else if (wide_out) launch_ks<T, 2, 0, 16>(a, in, x, blocks_per_sm, no_norm, *post, stream);
        else launch_ks<T, 2, 0, 8>(a, in, x, blocks_per_sm, no_norm, *post, stream);
        return;
    }
    switch ((in + 1023) / 1024) {
        case 1: launch_ks<T, 1, 0, 0>(a, in, x, blocks_per_sm, no_norm, no_post, stream); break;
        case 2: launch_ks<T, 2, 0, 0>(a, in, x, blocks_per_sm, no_norm, no_post, stream); break;
        case 3: launch_ks<T, 3, 0, 0>(a, in, x, blocks_per_sm, no_norm, no_post, stream); break;
        default: launch_ks<T, 4, 0, 0>(a, in, x, blocks_per_sm, no_norm, no_post, stream); break;
    }
}

void launch_rows(const Fp8Parts& a, int64_t in, const float* x, int64_t T, int blocks_per_sm,
                 const SmallLinearInputNorm* norm, const SmallLinearOutputNorm* post, cudaStream_t stream) {
    switch (T) {
        case 1: launch_t<1>(a, int(in), x, blocks_per_sm, norm, post, stream); break;
        case 2: launch_t<2>(a, int(in), x, blocks_per_sm, norm, post, stream); break;
        case 3: launch_t<3>(a, int(in), x, blocks_per_sm, norm, post, stream); break;
        default: launch_t<4>(a, int(in), x, blocks_per_sm, norm, post, stream); break;
    }
}

}  // namespace

bool small_linear_fp8_mma_supports(int64_t T, int64_t in, std::span<const SmallLinearFp8Part> parts, const float* x) {
    // in % 512: step 1's 8-lane groups then fill whole warps (its shuffles need every lane).
    if (T < 1 || T > kSmallLinearFp8V2MaxRows || in < 512 || in % 512 != 0 || in > 4096 || parts.empty() ||
        parts.size() > size_t(kSmallLinearFp8V2MaxParts) || reinterpret_cast<uintptr_t>(x) % 16 != 0)
        return false;
    for (const SmallLinearFp8Part& p : parts)
        if (p.out <= 0 || reinterpret_cast<uintptr_t>(p.w) % 16 != 0) return false;
    return true;
}

bool small_linear_fp8_mma_norm_supports(int64_t T, int64_t in) {
    return T >= 1 && T <= kSmallLinearFp8V2MaxRows && (in == 2048 || in == 4096);
}

bool small_linear_fp8_mma_output_norm_supports(int64_t T, int64_t in, int64_t out) {
    return small_linear_fp8_mma_norm_supports(T, in) && (out == 2048 || out == 4096);
}

void launch_small_linear_fp8_mma(std::span<const SmallLinearFp8Part> parts, int64_t in, const float* x, int64_t T,
                                 cudaStream_t stream, int blocks_per_sm, const SmallLinearInputNorm* norm) {
    QS_CHECK_MSG(small_linear_fp8_mma_supports(T, in, parts, x),
                 "launch_small_linear_fp8_mma: 1-4 rows, in a multiple of 512 up to 4,096, 1-4 weights, "
                 "16-byte aligned");
    QS_CHECK(blocks_per_sm >= 0);
    if (norm != nullptr) {
        QS_CHECK_MSG(small_linear_fp8_mma_norm_supports(T, in) && norm->w != nullptr && norm->h != nullptr,
                     "launch_small_linear_fp8_mma: the input norm needs rows of 2,048 or 4,096 and its weight and output");
        QS_CHECK_MSG(disjoint(norm->h, T * in, x, T * in) &&
                         disjoint(norm->h, T * in, norm->pending, T * in),
                     "launch_small_linear_fp8_mma: the norm's output must not overlap x or pending");
    }
    launch_rows(make_fp8_parts(parts, "launch_small_linear_fp8_mma", kGroupRows), in, x, T, blocks_per_sm, norm, nullptr, stream);
}

void launch_small_linear_fp8_mma_output_norm(const SmallLinearFp8Part& part, int64_t in, const float* x_in, int64_t T,
                                             const SmallLinearOutputNorm& post, cudaStream_t stream, int blocks_per_sm) {
    const SmallLinearFp8Part parts[1] = {part};
    QS_CHECK_MSG(small_linear_fp8_mma_supports(T, in, parts, x_in) &&
                     small_linear_fp8_mma_output_norm_supports(T, in, part.out),
                 "launch_small_linear_fp8_mma_output_norm: 1-4 rows, in and out of 2,048 or 4,096, 16-byte aligned");
    QS_CHECK_MSG(post.x && post.w && post.h && post.counter,
                 "launch_small_linear_fp8_mma_output_norm: x, the norm's weight, h and a counter");
    const int64_t n = T * part.out;
    QS_CHECK_MSG(disjoint(post.x, n, post.h, n) && disjoint(post.x, n, part.y, n) && disjoint(post.h, n, part.y, n) &&
                     disjoint(post.x, n, x_in, T * in) && disjoint(post.h, n, x_in, T * in) &&
                     disjoint(post.pending, n, post.x, n) && disjoint(post.pending, n, post.h, n) &&
                     disjoint(post.pending, n, part.y, n),
                 "launch_small_linear_fp8_mma_output_norm: x, h, y, pending and the input must not overlap");
    QS_CHECK(blocks_per_sm >= 0);
    launch_rows(make_fp8_parts(parts, "launch_small_linear_fp8_mma_output_norm", kGroupRows), in, x_in, T, blocks_per_sm, nullptr, &post, stream);
}

}  // namespace qs::cuda

// INT4 W4A16 and NVFP4 small-row dense linears (see int4_linear_kernels.h).
//
// Grid: ceil(rows / (8·RPW)) blocks of 8 warps over the launch's rows (1..4 weights' output features
// concatenated); warp w of block b computes rows (8b + w)·RPW + r, r < RPW, for all T rows of x,
// each row with its own weight's pointers (a warp's rows may belong to two weights). Lane l reads
// 16-byte chunks c = l, l + 32, ... of each of its rows (inputs 32c .. 32c + 31; all RPW rows'
// chunks are loaded before any is used), then per 8-input word: unpack the RPW rows' codes
// (int4_unpack.cuh), load and round the 8 x values of each token once, accumulate q·x in fp32 and
// add part · scale to the row's sum. A shuffle reduction gives y. With the output norm (PER > 0)
// every block then calls output_norm_last_block. Also compiles as host C++ for the SIMT emulation
// (bench/kernels/emu/int4_emu.cpp).
#include "backend/cuda/int4_linear_kernels.h"

#include <cuda_bf16.h>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/int4_linear_parts.cuh"
#include "backend/cuda/int4_unpack.cuh"
#include "backend/cuda/output_norm_last_block.cuh"
#include "backend/cuda/ptx_helpers.cuh"
#include "core/check.h"

namespace qs::cuda {
namespace {

constexpr int kWarps = 8;

__device__ __forceinline__ float round_bf16(float v) { return __bfloat162float(__float2bfloat16_rn(v)); }

using int4_parts::Int4Parts;

// F: the codes' format (int4_unpack.cuh). PER: 0, or out / 256 with the output norm (one weight).
template <w4::Code4 F, int T, int RPW, int PER>
__global__ __launch_bounds__(kWarps * 32) void int4_linear_kernel(const Int4Parts a, int in, int group,
                                                                  const float* __restrict__ x,
                                                                  const SmallLinearOutputNorm post) {
    static_assert(PER == 0 || kWarps == kNormWarps, "the output norm maps one element a thread over 8 warps");
    const int lane = threadIdx.x & 31;
    const int o0 = (blockIdx.x * kWarps + (threadIdx.x >> 5)) * RPW;
    const int words = in / 8, chunks = in / 32, groups = in / group;
    if (o0 < a.rows) {  // warp-uniform; no return: with the norm every thread reaches its barriers
        int4_parts::PartRow row[RPW];
        const uint4* wrow[RPW];
        const w4::scale_t<F>* srow[RPW];
#pragma unroll
        for (int r = 0; r < RPW; ++r) {  // rows past the launch: recomputed (the last), never stored
            row[r] = int4_parts::part_row(a, o0 + r < a.rows ? o0 + r : a.rows - 1);
            wrow[r] = reinterpret_cast<const uint4*>(row[r].codes + size_t(row[r].o) * words);
            srow[r] = static_cast<const w4::scale_t<F>*>(row[r].scales) + size_t(row[r].o) * groups;
        }
        float acc[RPW][T];
#pragma unroll
        for (int r = 0; r < RPW; ++r)
#pragma unroll
            for (int t = 0; t < T; ++t) acc[r][t] = 0.0f;
#pragma unroll 2
        for (int c = lane; c < chunks; c += 32) {
            uint4 w[RPW];
#pragma unroll
            for (int r = 0; r < RPW; ++r) w[r] = __ldg(wrow[r] + c);
#pragma unroll
            for (int q = 0; q < 4; ++q) {
                const int k0 = 32 * c + 8 * q;
                float wf[RPW][8];
                float s[RPW];
#pragma unroll
                for (int r = 0; r < RPW; ++r) {
                    const uint32_t wq = q == 0 ? w[r].x : q == 1 ? w[r].y : q == 2 ? w[r].z : w[r].w;
                    w4::unpack8<F>(wq, wf[r]);
                    s[r] = w4::scale_f32<F>(__ldg(srow[r] + k0 / group));
                }
#pragma unroll
                for (int t = 0; t < T; ++t) {
                    const float4* xp = reinterpret_cast<const float4*>(x + size_t(t) * in + k0);
                    const float4 a4 = __ldg(xp), b4 = __ldg(xp + 1);
                    const float xv[8] = {round_bf16(a4.x), round_bf16(a4.y), round_bf16(a4.z), round_bf16(a4.w),
                                         round_bf16(b4.x), round_bf16(b4.y), round_bf16(b4.z), round_bf16(b4.w)};
#pragma unroll
                    for (int r = 0; r < RPW; ++r) {
                        float d = 0.0f;
#pragma unroll
                        for (int j = 0; j < 8; ++j) d = fmaf(wf[r][j], xv[j], d);
                        acc[r][t] = fmaf(d, s[r], acc[r][t]);
                    }
                }
            }
        }
#pragma unroll
        for (int r = 0; r < RPW; ++r)
#pragma unroll
            for (int t = 0; t < T; ++t) {
                float v = acc[r][t];
#pragma unroll
                for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
                if constexpr (F == w4::Code4::kNvfp4) v *= row[r].global;
                if (lane == 0 && o0 + r < a.rows) row[r].y[size_t(t) * row[r].out + row[r].o] = v;
            }
    }
    if constexpr (PER > 0) output_norm_last_block<T, PER>(post, a.y[0], a.out[0]);
}

template <w4::Code4 F, int T, int RPW>
void launch_rows(const Int4Parts& a, int in, int group, const float* x, const SmallLinearOutputNorm* post,
                 cudaStream_t stream) {
    const dim3 grid((a.rows + kWarps * RPW - 1) / (kWarps * RPW)), block(kWarps * 32);
    if (post == nullptr) {
        ptx::launch_kernel(int4_linear_kernel<F, T, RPW, 0>, grid, block, 0, stream, a, in, group, x,
                           SmallLinearOutputNorm{});
    } else if (a.out[0] == 2048) {
        ptx::launch_kernel(int4_linear_kernel<F, T, RPW, 8>, grid, block, 0, stream, a, in, group, x, *post);
    } else {
        ptx::launch_kernel(int4_linear_kernel<F, T, RPW, 16>, grid, block, 0, stream, a, in, group, x, *post);
    }
    QS_CUDA_CHECK_LAUNCH();
}

template <w4::Code4 F, int RPW>
void launch_rpw(const Int4Parts& a, int in, int group, const float* x, int T, const SmallLinearOutputNorm* post,
                cudaStream_t stream) {
    switch (T) {
        case 1: launch_rows<F, 1, RPW>(a, in, group, x, post, stream); break;
        case 2: launch_rows<F, 2, RPW>(a, in, group, x, post, stream); break;
        case 3: launch_rows<F, 3, RPW>(a, in, group, x, post, stream); break;
        case 4: launch_rows<F, 4, RPW>(a, in, group, x, post, stream); break;
        case 5: launch_rows<F, 5, RPW>(a, in, group, x, post, stream); break;
        case 6: launch_rows<F, 6, RPW>(a, in, group, x, post, stream); break;
        case 7: launch_rows<F, 7, RPW>(a, in, group, x, post, stream); break;
        default: launch_rows<F, 8, RPW>(a, in, group, x, post, stream); break;
    }
}

}  // namespace

bool int4_linear_supports(int64_t T, int64_t in, int64_t group, const void* codes, const float* x) {
    return T >= 1 && T <= kInt4LinearMaxRows && in > 0 && in % 32 == 0 && in < (int64_t(1) << 30) && group > 0 &&
           group % 8 == 0 && in % group == 0 && reinterpret_cast<uintptr_t>(codes) % 16 == 0 &&
           reinterpret_cast<uintptr_t>(x) % 16 == 0;
}

bool int4_linear_output_norm_supports(int64_t T, int64_t out) {
    return T >= 1 && T <= kInt4LinearMaxRows && (out == 2048 || out == 4096);
}

void launch_4bit_linears(bool nvfp4, std::span<const Int4LinearPart> parts, int64_t in, int64_t group, const float* x,
                         int64_t T, cudaStream_t stream, const SmallLinearOutputNorm* post, int rows_per_warp) {
    QS_CHECK_MSG(!nvfp4 || group == kNvfp4LinearGroup, "launch_4bit_linears: NVFP4 scales one group of 16");
    for (const Int4LinearPart& p : parts)
        QS_CHECK_MSG(int4_linear_supports(T, in, group, p.codes, x), "launch_4bit_linears: unsupported shape or alignment");
    const Int4Parts a = int4_parts::make_parts(parts, nvfp4, 1, "launch_4bit_linears");
    int4_parts::check_output_norm(parts, T, post, "launch_4bit_linears");
    const int64_t rows = a.rows;
    // Default: enough blocks to cover the SMs (132 on the H200) several times; untuned (lab).
    int rpw = rows_per_warp;
    if (rpw == 0) rpw = rows >= 16384 ? 4 : rows >= 4096 ? 2 : 1;
    QS_CHECK_MSG(rpw == 1 || rpw == 2 || rpw == 4, "launch_4bit_linears: rows_per_warp must be 0, 1, 2 or 4");
    const int i = int(in), g = int(group), t = int(T);
    constexpr auto kI = w4::Code4::kInt4;
    constexpr auto kN = w4::Code4::kNvfp4;
    if (rpw == 1) nvfp4 ? launch_rpw<kN, 1>(a, i, g, x, t, post, stream) : launch_rpw<kI, 1>(a, i, g, x, t, post, stream);
    else if (rpw == 2) nvfp4 ? launch_rpw<kN, 2>(a, i, g, x, t, post, stream) : launch_rpw<kI, 2>(a, i, g, x, t, post, stream);
    else nvfp4 ? launch_rpw<kN, 4>(a, i, g, x, t, post, stream) : launch_rpw<kI, 4>(a, i, g, x, t, post, stream);
}

void launch_int4_linear(const uint32_t* codes, const uint16_t* scales, int64_t out, int64_t in, int64_t group,
                        const float* x, int64_t T, float* y, cudaStream_t stream, int rows_per_warp) {
    const Int4LinearPart part{codes, scales, out, y};
    launch_4bit_linears(false, std::span(&part, 1), in, group, x, T, stream, nullptr, rows_per_warp);
}

bool nvfp4_linear_supports(int64_t T, int64_t in, const void* codes, const float* x) {
    return int4_linear_supports(T, in, kNvfp4LinearGroup, codes, x);
}

void launch_nvfp4_linear(const uint32_t* codes, const uint8_t* scales, float global, int64_t out, int64_t in,
                         const float* x, int64_t T, float* y, cudaStream_t stream, int rows_per_warp) {
    const Int4LinearPart part{codes, scales, out, y, global};
    launch_4bit_linears(true, std::span(&part, 1), in, kNvfp4LinearGroup, x, T, stream, nullptr, rows_per_warp);
}

}  // namespace qs::cuda

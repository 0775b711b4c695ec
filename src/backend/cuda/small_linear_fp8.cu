// FP8 small-rows linear, version 2 (see small_linear_kernels.h): 1..4 rows in one launch.
//
// Version 1 quantises x inside the dot-product loop: every warp (one per output feature)
// re-quantises every row of x with an IEEE division per value, which made it slower than
// cuBLASLt from 2 rows on (bench/kernels/NOTES.md "Small-rows kernel"). Version 2 quantises x
// once per block instead:
//  1. Each lane first issues the loads of its first weight chunk (so DRAM latency overlaps the
//     quantisation), then the block quantises x [T, in] into shared memory, 8 lanes per
//     128-column group (16 values each), with exactly launch_quant_fp8_rows128's operations
//     (amax over the group, scale = amax / 448 by __fdiv_rn, code = e4m3_satfinite(x / scale)
//     by __fdiv_rn). The codes are kept as their fp32 values (exact), so that the dot loop reads
//     them without converting (as bf16 codes, before session 23, a shift per value: with the
//     weights' conversion that made the loop issue-bound, Nsight Compute: issue slots 50 % busy).
//  2. Warps stride over output features (grid capped at 2 blocks per SM by default, one wave, so the
//     per-block quantisation is paid twice per SM, not once per 8 outputs). A lane reads 16 fp8 weights
//     (16 bytes) at a time, 4 loads per chunk, the next chunk prefetched while this one is
//     multiplied with all T rows of x from shared memory; per 16 values
//     acc[t] += (w_scale · x_scale) · Σ w·q, the same order as version 1, so a row's result is
//     the same bits whatever T is (rows never mix).
//  Up to 4 weights of one input share a launch (the model's q/k/v and GDN qkv/z): warps stride
//  over the concatenated output features, so x is quantised once per block for all of them and
//  the launch's fixed latency (start, quantisation, the first chunk's round trip, the tail) is
//  paid once; a feature's result does not depend on the other weights of the launch.
//  With the layer's input norm (SmallLinearInputNorm; template PER = in / 256 > 0), step 1 takes
//  h = rms_norm_zc(x + pending) instead of x: each block normalises the T rows itself, thread i
//  owning elements i, i + 256, ... as the norm kernel's threads do (row_norm.cuh: the same sums in
//  the same order, so h is the same bits), and quantises them from registers: a 128-column group
//  is one element of each of 128 consecutive threads (4 warps), its amax a max over them (exact in
//  any order), so codes and scales are step 1's on h. Block 0 also stores h.
// Shared-memory layout of x: per 512-column block, values 4j .. 4j + 3 of every lane's 16 come
// together (lane-major, 16 bytes each) for j = 0..3: a quarter-warp's 16-byte loads hit 32
// distinct 4-byte banks.
#include "backend/cuda/small_linear_kernels.h"

#include <algorithm>
#include <atomic>
#include <cstring>

#include <cuda_bf16.h>
#include <cuda_fp8.h>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/device_limits.h"
#include "backend/cuda/ptx_helpers.cuh"  // the emulation shim (bench/kernels/emu) has its own
#include "backend/cuda/small_linear_fp8_common.cuh"
#include "backend/cuda/small_linear_fp8_norms.cuh"
#include "core/check.h"

namespace qs::cuda {
namespace {

using namespace small_fp8;

constexpr int kWarps = 8;
static_assert(kWarps == kNormWarps, "the fused norms map one element a thread over blocks of 8 warps");
constexpr int kLoads = 4;                // 16-byte weight loads per lane per chunk
constexpr int kChunk = 32 * 16 * kLoads; // columns per chunk (2,048)

// Float offset of column k of a row inside the shared-memory layout above.
__device__ __forceinline__ int smem_col(int k) {
    const int blk = k >> 9, r = k & 511, lane = r >> 4, j = r & 15;
    return blk * 512 + (j >> 2) * 128 + lane * 4 + (j & 3);
}

__device__ __forceinline__ void fp8x16_to_float(const uint4& raw, float* f) {
    const uint32_t words[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        __nv_fp8x2_e4m3 lo, hi;
        lo.__x = __nv_fp8x2_storage_t(words[i] & 0xffffu);
        hi.__x = __nv_fp8x2_storage_t(words[i] >> 16);
        const float2 a = static_cast<float2>(lo), b = static_cast<float2>(hi);
        f[4 * i] = a.x, f[4 * i + 1] = a.y, f[4 * i + 2] = b.x, f[4 * i + 3] = b.y;
    }
}

// Where a row's result goes (kept from its step's load to its last chunk).
struct RowOut {
    float* y;
    int o, out;
};

template <int T, int PER, int POST>
__global__ __launch_bounds__(kWarps * 32) void small_linear_fp8_v2_kernel(const Fp8Parts a, int in,
                                                                          const float* __restrict__ x,
                                                                          const SmallLinearInputNorm norm,
                                                                          const SmallLinearOutputNorm post) {
    float* xq = reinterpret_cast<float*>(ptx::dynamic_smem());  // [T][in] e4m3 values as fp32, swizzled
    float* xscale = xq + size_t(T) * in;                         // [T][in / 128]
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int groups = in / 128, scale_ld = (in + 127) / 128, chunks = (in + kChunk - 1) / kChunk;
    const int o_stride = gridDim.x * kWarps, out = a.rows;

    // Step s of this warp: output o0 + (s / chunks) · o_stride of the launch, chunk s % chunks.
    const int o0 = blockIdx.x * kWarps + warp;
    uint4 cur[kLoads] = {};
    float cur_s[kLoads] = {};
    RowOut cur_out{}, nxt_out{};  // the part lookup once per step, at its load
    auto valid = [&](int s) { return o0 + (s / chunks) * o_stride < out; };
    auto load = [&](int s, uint4* raw, float* sc, RowOut& dst) {
        const PartRow r = part_row(a, o0 + (s / chunks) * o_stride);
        dst = {r.y, r.o, r.out};
        const int c = s % chunks;
        const uint4* wr = reinterpret_cast<const uint4*>(r.w + size_t(r.o) * in);
        const float* srow = r.scale_inv + size_t(r.o / 128) * scale_ld;
#pragma unroll
        for (int u = 0; u < kLoads; ++u) {
            const int k = c * kChunk + u * 512 + lane * 16;
            if (k < in) {  // warp-uniform: in is a multiple of 512
                raw[u] = __ldg(wr + k / 16);
                sc[u] = __ldg(srow + k / 128);
            }
        }
    };
    if (valid(0)) load(0, cur, cur_s, cur_out);

    // 1. Quantise x (or h, with the norm): each lane 16 values of one group (8 lanes per group, 4
    //    groups per warp).
    if constexpr (PER > 0) {
        norm_quantise_x<T, PER>(x, norm, in, xscale, [&](int t, int c, float code) { xq[size_t(t) * in + smem_col(c)] = code; });
    }
    else for (int gi = warp * 4 + (lane >> 3); gi < T * groups; gi += kWarps * 4) {
        const int t = gi / groups, g = gi % groups, sub = lane & 7;
        const int k = g * 128 + sub * 16;
        float q[16];
        const float scale = quantise_16(x + size_t(t) * in + k, q);
        float* row = xq + size_t(t) * in;
#pragma unroll
        for (int j = 0; j < 4; ++j)
            *reinterpret_cast<float4*>(row + smem_col(k + 4 * j)) = make_float4(q[4 * j], q[4 * j + 1], q[4 * j + 2], q[4 * j + 3]);
        if (sub == 0) xscale[t * groups + g] = scale;
    }
    __syncthreads();

    // 2. Dot products, the next chunk's weights in flight while this one is multiplied (two
    //    chunks ahead was slower in the step: 9.2 → 10.6 µs a launch on the H200, session 23).
    float acc[T] = {};
    for (int s = 0;; ++s) {
        const int o = o0 + (s / chunks) * o_stride, c = s % chunks;
        if (o >= out) break;
        uint4 nxt[kLoads] = {};
        float nxt_s[kLoads] = {};
        if (valid(s + 1)) load(s + 1, nxt, nxt_s, nxt_out);
        if (c == 0) {
#pragma unroll
            for (int t = 0; t < T; ++t) acc[t] = 0.0f;
        }
#pragma unroll
        for (int u = 0; u < kLoads; ++u) {
            const int k = c * kChunk + u * 512 + lane * 16;
            if (k >= in) break;
            float wf[16];
            fp8x16_to_float(cur[u], wf);
            const int col = smem_col(k);  // values 4j .. 4j + 3 are 128 j further
#pragma unroll
            for (int t = 0; t < T; ++t) {
                const float* row = xq + size_t(t) * in;
                float xv[16];
#pragma unroll
                for (int j = 0; j < 4; ++j) {
                    const float4 f = *reinterpret_cast<const float4*>(row + col + 128 * j);
                    xv[4 * j] = f.x, xv[4 * j + 1] = f.y, xv[4 * j + 2] = f.z, xv[4 * j + 3] = f.w;
                }
                float d = 0.0f;
#pragma unroll
                for (int j = 0; j < 16; ++j) d = fmaf(wf[j], xv[j], d);
                acc[t] = fmaf(cur_s[u] * xscale[t * groups + k / 128], d, acc[t]);
            }
        }
        if (c == chunks - 1) {
#pragma unroll
            for (int t = 0; t < T; ++t) {
                float v = acc[t];
#pragma unroll
                for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
                if (lane == 0) cur_out.y[size_t(t) * cur_out.out + cur_out.o] = v;
            }
        }
#pragma unroll
        for (int u = 0; u < kLoads; ++u) cur[u] = nxt[u], cur_s[u] = nxt_s[u];
        cur_out = nxt_out;
    }
    if constexpr (POST > 0) output_norm_last_block<T, POST>(post, a.y[0], a.out[0]);
}

size_t smem_bytes(int64_t T, int64_t in) { return size_t(T * in) * 4 + size_t(T * (in / 128)) * 4; }

// The most a launch takes; above the default 48 KiB (four rows of in = 4,096: 64.5 KiB) it needs
// the opt-in (allow_dynamic_smem).
constexpr size_t kMaxSmem = 100 * 1024;

// Blocks of kernel<T> one SM holds (registers grow with T), so that a grid cap above it does not
// make a second wave. Cached per `in` in 512s (the model has 2,048 and 4,096; every device of a
// run is the same model of GPU); the query is not a stream operation, so it is safe in a capture.
template <int T, int PER, int POST>
int resident_blocks(int64_t in) {
    static std::atomic<int> cache[16] = {};
    const int64_t key = in / 512;
    if (key < 16) {
        const int b = cache[key].load(std::memory_order_relaxed);
        if (b > 0) return b;
    }
    int b = 0;
    auto* kernel = small_linear_fp8_v2_kernel<T, PER, POST>;
    QS_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&b, kernel, kWarps * 32, smem_bytes(T, in)));
    b = std::max(b, 1);
    if (key < 16) cache[key].store(b, std::memory_order_relaxed);
    return b;
}

template <int T, int PER, int POST>
void launch_rows(const Fp8Parts& a, int in, const float* x, int blocks_per_sm, const SmallLinearInputNorm& norm,
                 const SmallLinearOutputNorm& post, cudaStream_t stream) {
    auto* kernel = small_linear_fp8_v2_kernel<T, PER, POST>;
    allow_dynamic_smem<small_linear_fp8_v2_kernel<T, PER, POST>>(smem_bytes(T, in));
    blocks_per_sm = std::min(blocks_per_sm, resident_blocks<T, PER, POST>(in));
    const int blocks = int(std::min<int64_t>((a.rows + kWarps - 1) / kWarps, int64_t(sm_count()) * blocks_per_sm));
    ptx::launch_kernel(kernel, dim3(blocks), dim3(kWarps * 32), smem_bytes(T, in), stream, a, in, x, norm, post);
    QS_CUDA_CHECK_LAUNCH();
}

// The T-row instance with PER elements of the input norm a thread (0: none) and POST of the
// output norm (0: none).
template <int PER, int POST>
void launch_per(const Fp8Parts& a, int64_t T, int in, const float* x, int blocks_per_sm,
                const SmallLinearInputNorm& norm, const SmallLinearOutputNorm& post, cudaStream_t stream) {
    switch (T) {
        case 1: launch_rows<1, PER, POST>(a, in, x, blocks_per_sm, norm, post, stream); break;
        case 2: launch_rows<2, PER, POST>(a, in, x, blocks_per_sm, norm, post, stream); break;
        case 3: launch_rows<3, PER, POST>(a, in, x, blocks_per_sm, norm, post, stream); break;
        default: launch_rows<4, PER, POST>(a, in, x, blocks_per_sm, norm, post, stream); break;
    }
}

// The parts' table of a launch (shapes and alignment checked).
Fp8Parts make_parts(std::span<const SmallLinearFp8Part> parts, int64_t in, const float* x, int64_t T) {
    for (const SmallLinearFp8Part& part : parts)
        QS_CHECK_MSG(small_linear_fp8_v2_supports(T, in, part.w, x),
                     "launch_small_linear_fp8_v2: unsupported shape or alignment");
    return make_fp8_parts(parts, "launch_small_linear_fp8_v2");
}

}  // namespace

bool small_linear_fp8_v2_norm_supports(int64_t T, int64_t in) {
    return T >= 1 && T <= kSmallLinearFp8V2MaxRows && (in == 8 * kWarps * 32 || in == 16 * kWarps * 32);
}

bool small_linear_fp8_v2_supports(int64_t T, int64_t in, const void* w, const float* x) {
    return T >= 1 && T <= kSmallLinearFp8V2MaxRows && in > 0 && in % 512 == 0 && in < (int64_t(1) << 30) &&
           smem_bytes(T, in) <= kMaxSmem && reinterpret_cast<uintptr_t>(w) % 16 == 0 &&
           reinterpret_cast<uintptr_t>(x) % 16 == 0;
}

void launch_small_linear_fp8_v2(std::span<const SmallLinearFp8Part> parts, int64_t in, const float* x, int64_t T,
                                cudaStream_t stream, int blocks_per_sm, const SmallLinearInputNorm* norm) {
    QS_CHECK(blocks_per_sm >= 1);
    const Fp8Parts a = make_parts(parts, in, x, T);
    const SmallLinearOutputNorm no_post;
    if (norm == nullptr) return launch_per<0, 0>(a, T, int(in), x, blocks_per_sm, SmallLinearInputNorm{}, no_post, stream);
    QS_CHECK_MSG(small_linear_fp8_v2_norm_supports(T, in) && norm->w != nullptr && norm->h != nullptr,
                 "launch_small_linear_fp8_v2: the input norm needs rows of 2,048 or 4,096 and its weight and output");
    // h must not overlap what the blocks still read.
    QS_CHECK_MSG(disjoint(norm->h, T * in, x, T * in) && disjoint(norm->h, T * in, norm->pending, T * in),
                 "launch_small_linear_fp8_v2: h overlaps x or pending");
    if (in == 8 * kWarps * 32) launch_per<8, 0>(a, T, int(in), x, blocks_per_sm, *norm, no_post, stream);
    else launch_per<16, 0>(a, T, int(in), x, blocks_per_sm, *norm, no_post, stream);
}

bool small_linear_fp8_v2_output_norm_supports(int64_t T, int64_t out) {
    return small_linear_fp8_v2_norm_supports(T, out);
}

void launch_small_linear_fp8_v2_output_norm(const SmallLinearFp8Part& part, int64_t in, const float* x_in, int64_t T,
                                            const SmallLinearOutputNorm& post, cudaStream_t stream,
                                            int blocks_per_sm) {
    QS_CHECK(blocks_per_sm >= 1);
    const Fp8Parts a = make_parts(std::span(&part, 1), in, x_in, T);
    QS_CHECK_MSG(small_linear_fp8_v2_output_norm_supports(T, part.out) && post.x && post.w && post.h && post.counter,
                 "launch_small_linear_fp8_v2_output_norm: rows of 2,048 or 4,096, x, the norm's weight, h and a counter");
    const int64_t n = T * part.out;  // the last block reads y, x and pending while writing x and h
    QS_CHECK_MSG(disjoint(post.h, n, part.y, n) && disjoint(post.h, n, post.x, n) && disjoint(post.h, n, post.pending, n) &&
                     disjoint(post.x, n, part.y, n) && disjoint(post.x, n, post.pending, n) &&
                     disjoint(post.x, n, x_in, T * in) && disjoint(post.h, n, x_in, T * in),
                 "launch_small_linear_fp8_v2_output_norm: x, h, y, pending and the input must not overlap");
    const SmallLinearInputNorm no_norm;
    if (part.out == 8 * kWarps * 32) launch_per<0, 8>(a, T, int(in), x_in, blocks_per_sm, no_norm, post, stream);
    else launch_per<0, 16>(a, T, int(in), x_in, blocks_per_sm, no_norm, post, stream);
}

void launch_small_linear_fp8_v2(const void* w, const float* scale_inv, int64_t out, int64_t in, const float* x,
                                int64_t T, float* y, cudaStream_t stream, int blocks_per_sm) {
    const SmallLinearFp8Part part{w, scale_inv, out, y};
    launch_small_linear_fp8_v2(std::span(&part, 1), in, x, T, stream, blocks_per_sm);
}

}  // namespace qs::cuda

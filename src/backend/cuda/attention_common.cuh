// Shared pieces of the gated attention kernels (attention_*.cu; public API attention_kernels.h):
// the kernels' argument block, the device helpers every variant uses (warp sum, cache rounding,
// q/k norm + RoPE in the CPU's operation order, sigmoid) and the internal launchers that
// attention_kernels.cu sequences. Included by .cu files only; runs wherever they launch (the
// engine thread's stream).
//
// Layouts (all row-major): qg [T, Hq, 2D] fp32 (query D, gate D per head); k, v [T, Hkv, D] fp32;
// caches [num_blocks, block_size, Hkv, D] bf16 or fp8 e4m3; out [T, Hq*D] fp32.
// Workspace: part_o [slots, Hq, D] fp32 (unnormalised split-K outputs), part_ml [slots, Hq]
// float2 (running max in log2 units, softmax denominator); slot = seq * splits + split (row *
// splits + split when Args::dec_rows > 1).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include "backend/cuda/attention_kernels.h"

namespace qs::cuda::attn {

constexpr int kMaxRotaryHalf = 128;   // rotary_dim <= D <= 256
constexpr int kMaxSplitsHard = 64;    // combine kernel's shared array
constexpr int64_t kMaxPartialSlots = 2048;  // (seq, split) pairs the workspace holds at most
constexpr int kStoreWarps = 4;
constexpr int kDecodeMmaRows = 16;  // (row, head) pairs of one decode block (one warp's mma rows)
constexpr float kNegInf = -INFINITY;

// Everything the kernels read, passed by value as a __grid_constant__ parameter.
struct Args {
    const float* qg;
    const float* k;
    const float* v;
    const float* q_norm_w;
    const float* k_norm_w;
    void* k_cache;
    void* v_cache;
    DeviceBatch batch;
    float* out;
    float* part_o;    // [slots, Hq, D]
    float2* part_ml;  // [slots, Hq]
    int Hq, Hkv, D, G, rotary_dim, block_size, bs_shift;  // bs_shift = log2(block_size) or -1
    int splits;
    // Sequences of 1..dec_rows rows run on the decode kernel (1: single-row only), dec_hg query
    // heads per decode block (16 / dec_hg >= dec_rows packed rows). With dec_rows > 1 the
    // split-K partial slots are per row (row * splits + split), else per sequence.
    int dec_rows, dec_hg;
    int combine_version;  // GatedAttentionParams::combine_version
    float eps, scale_log2;  // scale_log2 = log2(e) / sqrt(D)
    float inv_freq[kMaxRotaryHalf];
    // Position stream (0 t, 1 h, 2 w) of each rotary frequency (GatedAttentionParams::
    // mrope_section); irrelevant for 1-D batches, whose three streams are equal.
    unsigned char rope_stream[kMaxRotaryHalf];
};

inline int64_t partial_slots(int64_t num_tokens, int64_t max_splits) {
    if (max_splits <= 1) return 0;
    return std::min<int64_t>(num_tokens * max_splits, kMaxPartialSlots);
}

// ---------------------------------------------------------------------------------------------
// Device helpers

__device__ __forceinline__ float warp_sum(float x) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
    return x;
}

// A row's rotary positions in the t, h and w streams: batch.rope_positions [3][num_tokens] when
// set (M-RoPE), else the 1-D position in all three.
__device__ __forceinline__ int3 rope_pos(const DeviceBatch& b, int row) {
    if (b.rope_positions == nullptr) {
        const int p = b.positions[row];
        return make_int3(p, p, p);
    }
    const int T = b.num_tokens;
    return make_int3(b.rope_positions[row], b.rope_positions[T + row], b.rope_positions[2 * T + row]);
}

template <typename CT>
__device__ __forceinline__ CT to_cache(float x);
template <>
__device__ __forceinline__ __nv_bfloat16 to_cache<__nv_bfloat16>(float x) {
    return __float2bfloat16_rn(x);  // round to nearest even, as core/dtype.h f32_to_bf16
}
template <>
__device__ __forceinline__ float to_cache<float>(float x) {
    return x;  // reference precision: the f32 cache keeps k and v as computed
}
template <>
__device__ __forceinline__ __nv_fp8_e4m3 to_cache<__nv_fp8_e4m3>(float x) {
    return __nv_fp8_e4m3(x);  // cvt.rn.satfinite.e4m3x2.f32, as core/dtype.cpp f32_to_fp8e4m3
}

// One warp: x[0, D) fp32 -> zero-centred RMSNorm (weight w) -> NeoX RoPE on the first `rot`
// dims at `pos` (frequency i at the position of stream `stream[i]`: x t, y h, z w; rope_pos),
// in the CPU's operation order (products and sums rounded one by one; only the
// sum of squares is ordered differently). Lane holds element j = lane + 32c in vals[c]
// (0 for j >= D). scratch: this warp's >= D floats of shared memory.
template <int C>
__device__ __forceinline__ void norm_rope_warp(const float* __restrict__ x, const float* __restrict__ w, int D,
                                               int rot, int3 pos, float eps, const float* inv_freq,
                                               const unsigned char* stream, float* scratch, float (&vals)[C]) {
    const int lane = threadIdx.x & 31;
    float ss = 0.0f;
#pragma unroll
    for (int c = 0; c < C; ++c) {
        const int j = lane + 32 * c;
        vals[c] = j < D ? x[j] : 0.0f;
        ss = fmaf(vals[c], vals[c], ss);
    }
    ss = warp_sum(ss);
    // Explicitly rounded operations: the stored k must round like the CPU's, --use_fast_math or not.
    const float inv = __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(__fdiv_rn(ss, float(D)), eps)));
#pragma unroll
    for (int c = 0; c < C; ++c) {
        const int j = lane + 32 * c;
        if (j < D) {
            vals[c] = __fmul_rn(__fmul_rn(vals[c], inv), __fadd_rn(1.0f, w[j]));
            scratch[j] = vals[c];
        }
    }
    __syncwarp();
    const int half = rot >> 1;
#pragma unroll
    for (int c = 0; c < C; ++c) {
        const int j = lane + 32 * c;
        if (j < rot) {
            const bool lo = j < half;
            const int i = lo ? j : j - half;
            // Angles reach ~1e4 rad: sin/cos in double, rounded once, track the CPU's cosf/sinf
            // (correctly rounded in glibc) better than sincosf's 2 ulp, and fast-math cannot touch it.
            const int st = stream[i];
            const int p = st == 0 ? pos.x : (st == 1 ? pos.y : pos.z);
            double sd, cd;
            sincos(double(__fmul_rn(float(p), inv_freq[i])), &sd, &cd);
            const float sn = float(sd), cs = float(cd);
            const float other = scratch[lo ? j + half : j - half];
            vals[c] = lo ? __fsub_rn(__fmul_rn(vals[c], cs), __fmul_rn(other, sn))
                         : __fadd_rn(__fmul_rn(vals[c], cs), __fmul_rn(other, sn));
        }
    }
    __syncwarp();  // scratch is reused by this warp's next call
}

__device__ __forceinline__ float sigmoidf_(float x) { return 1.0f / (1.0f + expf(-x)); }

// One warp: query head `head` of `row` (its q half of a.qg) through norm_rope_warp, rounded by Op
// into dst[0, DP) (lane + 32c), or zeros where !valid (padding columns; warp-uniform). The query
// prologue of the prefill/decode tensor-core kernel and of decode version 2.
template <int DP, typename Op, typename T16>
__device__ __forceinline__ void store_query_row(const Args& a, bool valid, int row, int head, float* scratch,
                                                T16* dst) {
    const int lane = threadIdx.x & 31;
    if (valid) {
        float vals[DP / 32];
        norm_rope_warp<DP / 32>(a.qg + (int64_t(row) * a.Hq + head) * 2 * a.D, a.q_norm_w, a.D, a.rotary_dim,
                                rope_pos(a.batch, row), a.eps, a.inv_freq, a.rope_stream, scratch, vals);
#pragma unroll
        for (int c = 0; c < DP / 32; ++c) dst[lane + 32 * c] = Op::from_float(vals[c]);
    } else {
#pragma unroll
        for (int c = 0; c < DP / 32; ++c) dst[lane + 32 * c] = Op::from_float(0.0f);
    }
}


// ---------------------------------------------------------------------------------------------
// Launchers (each in its own .cu file; instantiated for CT = __nv_bfloat16 and __nv_fp8_e4m3, DP =
// 64, 128, 256). All enqueue on `stream` only.

// 1. K/V norm + RoPE + paged store, every row (attention_store.cu; any D <= 256).
template <typename CT>
void launch_kv_store(const Args& a, cudaStream_t stream);
// 2./3. Decode rows (sequences with one row): split-K attention + combine (attention_decode.cu).
// Sets a.splits.
template <typename CT, int DP>
void launch_decode(const GatedAttentionParams& p, Args& a, cudaStream_t stream);
// 2'. Decode rows, version 2 (attention_decode_v2.cu; GatedAttentionParams::decode_version 2 where
// decode_v2_applies(D): D % 32 == 0, D <= DP): same rows, same partials and combine. Sets a.splits, a.dec_hg.
bool decode_v2_applies(int D);
template <typename CT, int DP>
void launch_decode_v2(const GatedAttentionParams& p, Args& a, cudaStream_t stream);
// Shared by both decode versions (attention_decode.cu): the split count of a decode grid of
// base_blocks blocks per split (two waves of resident blocks, bounded by the workspace's partial
// slots and p.max_splits; never by context), and the combine pass over a.splits partials.
int decode_split_count(const GatedAttentionParams& p, const Args& a, int64_t base_blocks, int blocks_per_sm);
void launch_decode_combine(const Args& a, cudaStream_t stream);
// 4. Prefill rows (sequences with several rows): causal flash attention (attention_prefill.cu).
template <typename CT, int DP>
void launch_prefill_rows(const GatedAttentionParams& p, const Args& a, cudaStream_t stream);
// 4'. Prefill rows, version 2 (attention_prefill_wgmma.cu; D = 256, attention_prefill_v2_applies).
template <typename CT>
void launch_prefill_wgmma(const GatedAttentionParams& p, const Args& a, cudaStream_t stream);
// 5. Head dims the tensor-core kernels do not tile (D % 32 != 0): every row, CUDA cores, fp32
// (attention_fallback.cu).
template <typename CT>
void launch_fallback(const Args& a, cudaStream_t stream);

}  // namespace qs::cuda::attn

// The small-T MoE kernels' value helpers (moe_small*.cu): 16-byte weight
// loads, L2 reads of what an earlier grid wrote, e4m3 and bf16 unpacking to fp32. Include it after
// ptx_helpers.cuh (or, in the CPU emulation, after the shim that defines qs::cuda::ptx). Also
// compiles as host C++ for bench/kernels/moe_emu.cpp.
#pragma once

#include <cstdint>
#include <cstring>

namespace qs::cuda::moe::small_math {

__device__ __forceinline__ float f32_bits(uint32_t u) {
#if defined(QS_MOE_EMULATE)
    float f;
    std::memcpy(&f, &u, 4);
    return f;
#else
    return __uint_as_float(u);
#endif
}

__device__ __forceinline__ uint4 load16(const void* p) {
#if defined(QS_MOE_EMULATE)
    return *static_cast<const uint4*>(p);
#else
    return __ldg(static_cast<const uint4*>(p));
#endif
}

// A read-only value (weights, scales) through the non-coherent cache.
template <class T>
__device__ __forceinline__ T ld(const T* p) {
#if defined(QS_MOE_EMULATE)
    return *p;
#else
    return __ldg(p);
#endif
}

// A value an earlier grid wrote, read from L2 (v2's kernels start before that grid's end is known
// to their L1).
template <class T>
__device__ __forceinline__ T load_cg(const T* p) {
#if defined(QS_MOE_EMULATE)
    return *p;
#else
    return __ldcg(p);
#endif
}

__device__ __forceinline__ uint32_t word(const uint4& v, int i) { return i == 0 ? v.x : i == 1 ? v.y : i == 2 ? v.z : v.w; }

// e4m3 bytes b0..b3 of w (b0 = lowest k) → f[0..3] = value·2^-120 exactly: bf16x2 pairs by the bit
// moves of moe_gemm.cu, then each bf16 becomes the fp32 with the same upper bits.
__device__ __forceinline__ void e4m3x4_to_f32_scaled(uint32_t w, float (&f)[4]) {
    const uint32_t lo = (ptx::prmt(w, 0x9180u) << 4) & 0x87F087F0u;
    const uint32_t hi = (ptx::prmt(w, 0xB3A2u) << 4) & 0x87F087F0u;
    f[0] = f32_bits(lo << 16);
    f[1] = f32_bits(lo & 0xFFFF0000u);
    f[2] = f32_bits(hi << 16);
    f[3] = f32_bits(hi & 0xFFFF0000u);
}

// bf16 pair (element 0 in the low half) → fp32.
__device__ __forceinline__ void bf16x2_to_f32(uint32_t w, float& a, float& b) {
    a = f32_bits(w << 16);
    b = f32_bits(w & 0xFFFF0000u);
}

// One lane's 16-byte chunk w of a down-matrix row times the matching h values (bf16; FP8: 16
// values, h0 = values 0-7, h1 = 8-15; BF16: 8 values in h0), summed in k order from 0: the partial
// dot both small-T down kernels take (moe_small.cu, moe_small_down_slots.cu), so their bits agree.
template <bool FP8>
__device__ __forceinline__ float down_chunk_dot(const uint4& w, const uint4& h0, const uint4& h1) {
    float s = 0.0f;
#pragma unroll
    for (int q = 0; q < 4; ++q) {
        if constexpr (FP8) {
            float wf[4], a0, a1, a2, a3;
            e4m3x4_to_f32_scaled(word(w, q), wf);
            bf16x2_to_f32(word(q < 2 ? h0 : h1, (2 * q) & 3), a0, a1);
            bf16x2_to_f32(word(q < 2 ? h0 : h1, (2 * q + 1) & 3), a2, a3);
            s = fmaf(wf[0], a0, s);
            s = fmaf(wf[1], a1, s);
            s = fmaf(wf[2], a2, s);
            s = fmaf(wf[3], a3, s);
        } else {
            float w0, w1, a0, a1;
            bf16x2_to_f32(word(w, q), w0, w1);
            bf16x2_to_f32(word(h0, q), a0, a1);
            s = fmaf(w0, a0, s);
            s = fmaf(w1, a1, s);
        }
    }
    return s;
}

__device__ __forceinline__ float bf16_round(float v) { return __bfloat162float(__float2bfloat16_rn(v)); }

}  // namespace qs::cuda::moe::small_math

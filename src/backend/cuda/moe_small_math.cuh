// The small-T MoE kernels' value helpers (moe_small.cu, moe_small_down_slots.cu): 16-byte weight
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

__device__ __forceinline__ float bf16_round(float v) { return __bfloat162float(__float2bfloat16_rn(v)); }

}  // namespace qs::cuda::moe::small_math

// INT4 → fp32 (or bf16 pairs) in registers, shared by the INT4 kernels (int4_linear_kernels.cu,
// moe_small_int4.cu; bf16x2_pair: moe_decode_gemm_int4.cu).
// A u32 word holds 8 codes u = q + 8 (input i of the word at bits 4i). For s in 0..3,
// ((w >> 4s) & 0x000F000F) | 0x43004300 is the bf16 pair (128 + u_s, 128 + u_{s+4}) exactly (one
// lop3 after the shift); each bf16 widens to fp32 by a bit move and 136 is subtracted exactly, so
// f[i] = q_i with no conversion instruction. Compiles as host C++ too (the CPU emulation).
#pragma once

#include <cstdint>

#include "backend/cuda/float_bits.cuh"

namespace qs::cuda::w4 {

// f[i] = q_i (input i of the word), i = 0..7.
__device__ __forceinline__ void unpack8(uint32_t w, float (&f)[8]) {
#pragma unroll
    for (int s = 0; s < 4; ++s) {
        const uint32_t pair = ((w >> (4 * s)) & 0x000F000Fu) | 0x43004300u;
        f[s] = bits_f32(pair << 16) - 136.0f;
        f[s + 4] = bits_f32(pair & 0xFFFF0000u) - 136.0f;
    }
}

// A bf16 scale (bits) as fp32.
__device__ __forceinline__ float bf16_bits_f32(uint16_t b) { return bits_f32(uint32_t(b) << 16); }

}  // namespace qs::cuda::w4

namespace qs::cuda::w4 {

// The bf16x2 pair (q_s, q_{s+4}) of a u32 code word (s = 0..3; low half q_s), exact: one shift and
// one lop3 make (128 + u_s, 128 + u_{s+4}) as above, one bf16x2 fma subtracts 136 (results are
// integers in [−8, 7], exact in bf16). For the tensor-core INT4 kernels (moe_decode_gemm_int4.cu),
// whose MMA operands are bf16 pairs.
__device__ __forceinline__ uint32_t bf16x2_pair(uint32_t w, int s) {
    const uint32_t biased = ((w >> (4 * s)) & 0x000F000Fu) | 0x43004300u;
#if defined(__CUDA_ARCH__)
    uint32_t d;
    asm("fma.rn.bf16x2 %0, %1, %2, %3;\n" : "=r"(d) : "r"(biased), "r"(0x3F803F80u), "r"(0xC308C308u));
    return d;
#else
    const auto q = [](uint32_t half) {  // 128 + u → the bf16 bits of u − 8 (exact)
        const float v = bits_f32(half << 16) - 136.0f;
        uint32_t b;
        std::memcpy(&b, &v, 4);
        return b >> 16;
    };
    return q(biased & 0xFFFFu) | (q(biased >> 16) << 16);
#endif
}

}  // namespace qs::cuda::w4

// 4-bit codes → fp32 (or bf16 pairs) in registers, shared by the 4-bit kernels (int4_linear_kernels.cu,
// moe_small_int4.cu; bf16x2_pair: moe_decode_gemm_int4.cu), templated on the code's format:
//  - Code4::kInt4: q's 4-bit two's complement c = u ^ 8 with u = q + 8 (backend/int4_layout.h).
//    For s in 0..3, ((w >> 4s) & 0x000F000F) ^ 0x43084308 is the bf16 pair (128 + u_s, 128 + u_{s+4})
//    exactly (one lop3 after the shift: the nibble sits below 0x4300's bits, so ^ 0x4300 is | 0x4300,
//    and ^ 8 turns c back into u); each bf16 widens to fp32 by a bit move and 136 is subtracted
//    exactly, so f[i] = q_i with no conversion instruction.
//  - Code4::kNvfp4: E2M1 (backend/nvfp4_layout.h: sign, 2 exponent bits e, 1 mantissa bit m). The
//    three magnitude bits placed at bf16 bits 8..6 (exponent field e, mantissa's top bit m) with the
//    sign at bit 15 are the bf16 value e2m1 · 2^−126 for every code, e = 0 included (the bf16
//    subnormal m · 2^−127 = (m/2) · 2^−126): two shifts and one lop3 per pair, one bf16x2 fma by
//    2^126 (exact: a power of two; bf16 arithmetic keeps subnormals) gives the pair of values.
// A u32 word holds 8 codes, input i of the word at bits 4i. Compiles as host C++ too (the CPU
// emulation).
#pragma once

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "backend/cuda/float_bits.cuh"

namespace qs::cuda::w4 {

// The 4-bit code formats (Int4DeviceLayout, Nvfp4DeviceLayout).
enum class Code4 { kInt4, kNvfp4 };

// XORed into a pair of INT4 nibbles (c, c') at bits 0..3 and 16..19: the bf16 pair (128 + u, 128 + u').
constexpr uint32_t kInt4Biased = 0x43084308u;

namespace detail {
// shift > 0: left, < 0: right.
template <int S>
__device__ __forceinline__ uint32_t shifted(uint32_t w) {
    if constexpr (S >= 0) return w << S;
    else return w >> (-S);
}

// E2M1 codes s and s + 4 of w as the bf16 pair (e2m1_s · 2^−126, e2m1_{s+4} · 2^−126).
template <int S>
__device__ __forceinline__ uint32_t e2m1_pair_scaled_down(uint32_t w) {
    // Magnitude of nibble S (bits 4S..4S+2) to bits 6..8, its sign (bit 4S+3) to bit 15; nibble
    // S + 4 sits 16 bits higher and lands 16 bits higher with the same shifts.
    return (shifted<6 - 4 * S>(w) & 0x01C001C0u) | (shifted<12 - 4 * S>(w) & 0x80008000u);
}

// a · 2^126 for each bf16 of a pair (exact).
__device__ __forceinline__ uint32_t times_2_126(uint32_t a) {
#if defined(__CUDA_ARCH__)
    uint32_t d;
    // c = −0 keeps −0 products −0 (the value is a·b exactly).
    asm("fma.rn.bf16x2 %0, %1, %2, %3;\n" : "=r"(d) : "r"(a), "r"(0x7E807E80u), "r"(0x80008000u));
    return d;
#else
    const auto up = [](uint32_t half) {
        const float v = bits_f32(half << 16) * 0x1p126f;  // host floats keep subnormals
        uint32_t b;
        std::memcpy(&b, &v, 4);
        return b >> 16;  // exact: an E2M1 value
    };
    return up(a & 0xFFFFu) | (up(a >> 16) << 16);
#endif
}

template <int S>
__device__ __forceinline__ uint32_t e2m1_pair(uint32_t w) {
    return times_2_126(e2m1_pair_scaled_down<S>(w));
}

// e2m1_pair_scaled_down for a pair index s (0..3) known only after unrolling.
__device__ __forceinline__ uint32_t e2m1_pair_scaled_down_at(uint32_t w, int s) {
    return s == 0   ? e2m1_pair_scaled_down<0>(w)
           : s == 1 ? e2m1_pair_scaled_down<1>(w)
           : s == 2 ? e2m1_pair_scaled_down<2>(w)
                    : e2m1_pair_scaled_down<3>(w);
}
// (a & mask) ^ magic as one lop3. Written as C++ (& then ^), ptxas emitted two LOP3s (a SASS LOP3
// takes one immediate operand, and it did not move a constant into a register to fuse them): four
// instructions a pair instead of three in the INT4 grouped GEMM's inner loop (cuobjdump -sass,
// session 44). Here both constants are register operands, which the compiler sets once.
__device__ __forceinline__ uint32_t and_xor(uint32_t a, uint32_t mask, uint32_t magic) {
#if defined(__CUDA_ARCH__)
    uint32_t d;
    asm("lop3.b32 %0, %1, %2, %3, 0x6a;\n" : "=r"(d) : "r"(a), "r"(mask), "r"(magic));  // (a & b) ^ c
    return d;
#else
    return (a & mask) ^ magic;
#endif
}
}  // namespace detail

// f[i] = the value of code i of the word (INT4: q_i; NVFP4: e2m1_i), i = 0..7.
template <Code4 F = Code4::kInt4>
__device__ __forceinline__ void unpack8(uint32_t w, float (&f)[8]) {
    if constexpr (F == Code4::kInt4) {
#pragma unroll
        for (int s = 0; s < 4; ++s) {
            const uint32_t pair = detail::and_xor(w >> (4 * s), 0x000F000Fu, kInt4Biased);
            f[s] = bits_f32(pair << 16) - 136.0f;
            f[s + 4] = bits_f32(pair & 0xFFFF0000u) - 136.0f;
        }
    } else {
        const uint32_t p[4] = {detail::e2m1_pair<0>(w), detail::e2m1_pair<1>(w), detail::e2m1_pair<2>(w),
                               detail::e2m1_pair<3>(w)};
#pragma unroll
        for (int s = 0; s < 4; ++s) {
            f[s] = bits_f32(p[s] << 16);
            f[s + 4] = bits_f32(p[s] & 0xFFFF0000u);
        }
    }
}

// The 4-bit formats' scale storage: INT4 bf16 bits [rows, K/group] (backend/int4_layout.h); NVFP4
// the checkpoint's E4M3 block scale bytes [rows, K/16] (backend/nvfp4_layout.h).
template <Code4 F>
using scale_t = std::conditional_t<F == Code4::kNvfp4, uint8_t, uint16_t>;

// A stored scale as fp32, exact. NVFP4: the byte's exponent and mantissa bits placed at fp32 bits
// 20..26 (the exponent field's low 4 bits, the mantissa's top 3) and its sign at bit 31 are the fp32
// value scale · 2^−120 (E4M3's exponent bias 7 against 127), exponent field 0 included (fp32
// subnormals: the kernels are built without flush-to-zero); × 2^120 is exact. The layout refuses the
// NaN bytes 0x7F and 0xFF, which this would read as finite.
template <Code4 F>
__device__ __forceinline__ float scale_f32(scale_t<F> s) {
    if constexpr (F == Code4::kNvfp4) {
        const uint32_t b = s;
        return bits_f32(((b & 0x7Fu) << 20) | ((b & 0x80u) << 24)) * 0x1p120f;
    } else {
        return bits_f32(uint32_t(s) << 16);
    }
}

}  // namespace qs::cuda::w4

namespace qs::cuda::w4 {

// The bf16x2 pair (v_s, v_{s+4}) of a u32 code word (s = 0..3; low half v_s), exact. INT4: one
// shift and one lop3 make (128 + u_s, 128 + u_{s+4}) as above, one bf16x2 fma subtracts 136
// (results are integers in [−8, 7], exact in bf16); NVFP4: as unpack8. For the tensor-core 4-bit
// kernels (moe_decode_gemm_int4.cu), whose MMA operands are bf16 pairs.
template <Code4 F = Code4::kInt4>
__device__ __forceinline__ uint32_t bf16x2_pair(uint32_t w, int s) {
    if constexpr (F == Code4::kNvfp4) {
        return detail::times_2_126(detail::e2m1_pair_scaled_down_at(w, s));
    } else {
        const uint32_t biased = detail::and_xor(w >> (4 * s), 0x000F000Fu, kInt4Biased);
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
}

// a · b for each bf16 of the pairs, rounded to nearest even (a · b exact in fp32, so one rounding;
// exact where the product fits bf16, as an E2M1 value times an E4M3 block scale does: ≤ 6 significant
// bits). The NVFP4 tensor-core kernels fold each code pair's block scale into the MMA operand with it.
__device__ __forceinline__ uint32_t mul_bf16x2(uint32_t a, uint32_t b) {
#if defined(__CUDA_ARCH__)
    uint32_t d;
    // c = −0 keeps −0 products −0 (the value is a·b rounded once).
    asm("fma.rn.bf16x2 %0, %1, %2, %3;\n" : "=r"(d) : "r"(a), "r"(b), "r"(0x80008000u));
    return d;
#else
    const auto mul = [](uint32_t x, uint32_t y) {
        const float v = bits_f32(x << 16) * bits_f32(y << 16);  // exact: 8-bit significands
        uint32_t u;
        std::memcpy(&u, &v, 4);
        return (u + 0x7FFFu + ((u >> 16) & 1u)) >> 16;  // round to nearest even (finite values)
    };
    return mul(a & 0xFFFFu, b & 0xFFFFu) | (mul(a >> 16, b >> 16) << 16);
#endif
}

// NVFP4 operands with the block scale folded in, for the tensor-core kernels: one bf16x2 multiply a
// pair instead of two. bf16x2_pair's ×2^126 (which lifts e2m1 · 2^−126 to e2m1) moves into the
// block scale, but 2^126 · 448 (the largest E4M3 scale) overflows bf16, so the scale takes 2^118
// and the operand is e2m1 · scale · 2^−8: still exact (≤ 6 significant bits, smallest magnitude
// 0.5 · 2^−9 · 2^−8 = 2^−18, normal). MMA sums of such operands are the unfolded sums times 2^−8
// exactly (a power of two commutes with every rounding while nothing is subnormal), so a kernel
// multiplies by kNvfp4FoldedUnscale where it applies the matrix's global: the same bits as
// without the fold.
// The scales arrive as E4M3 bytes. A byte's exponent and mantissa bits placed at bf16 bits 4..10
// and its sign at bit 15 are the bf16 value scale · 2^−120 (as in scale_f32; subnormal bytes
// become bf16 subnormals, which bf16 arithmetic keeps), so the fold multiplies by 2^238 in two
// exact steps of 2^119 (bf16's largest power of two is 2^127).
constexpr uint32_t kNvfp4ScaleFoldHalf = 0x7B007B00u;  // bf16x2 (2^119, 2^119)
constexpr float kNvfp4FoldedUnscale = 256.0f;          // 2^8

// Two E4M3 bytes (bits 0..7 and 8..15 of v) as the bf16x2 pair (s0 · 2^−120, s1 · 2^−120), exact.
__device__ __forceinline__ uint32_t e4m3x2_scaled_down(uint32_t v) {
    const uint32_t x = (v & 0xFFu) | ((v & 0xFF00u) << 8);  // byte 1 to bits 16..23
    return ((x & 0x007F007Fu) << 4) | ((x & 0x00800080u) << 8);
}

// Two E4M3 block scale bytes (bits 0..7: the low half's, 8..15: the high half's) as the bf16x2 pair
// scale · 2^118 (exact), for nvfp4_operand.
__device__ __forceinline__ uint32_t nvfp4_scale_folded(uint32_t bytes) {
    const uint32_t half = mul_bf16x2(e4m3x2_scaled_down(bytes), kNvfp4ScaleFoldHalf);  // scale · 2^−1
    return mul_bf16x2(half, kNvfp4ScaleFoldHalf);
}

// The pair (v_s, v_{s+4}) of an NVFP4 code word times its folded block scale (nvfp4_scale_folded's,
// one scale for both halves or one each): e2m1 · scale · 2^−8 per half, exact.
__device__ __forceinline__ uint32_t nvfp4_operand(uint32_t w, int s, uint32_t folded_scale) {
    return mul_bf16x2(detail::e2m1_pair_scaled_down_at(w, s), folded_scale);
}

// The A operands of the two m16n8k16 MMAs of code word j (0..3) of a lane's 32-code chunk in the
// 4-bit tensor-core kernels' mapping (int4_linear_mma.cu's header): w from row g, w8 from row g + 8;
// MMA 0 takes the pairs (0, 4), (1, 5), MMA 1 (2, 6), (3, 7). NVFP4: s / s8 hold the chunk's two block
// scale bytes of rows g / g + 8 (bits 0..7: the first 16 columns'); word j lies in block j / 2 and its
// pairs are multiplied by that scale folded (nvfp4_operand: the values times 2^−8, so the caller
// multiplies its sums by kNvfp4FoldedUnscale). INT4 ignores s and s8.
template <Code4 F>
__device__ __forceinline__ void mma_word_operands(uint32_t w, uint32_t w8, uint32_t s, uint32_t s8, int j,
                                                  uint32_t (&a0)[4], uint32_t (&a1)[4]) {
    if constexpr (F == Code4::kNvfp4) {
        const uint32_t fs = nvfp4_scale_folded(s), fs8 = nvfp4_scale_folded(s8);  // the same for every j
        const uint32_t sg = j < 2 ? fs & 0xFFFFu : fs >> 16, sg8 = j < 2 ? fs8 & 0xFFFFu : fs8 >> 16;
        const uint32_t s2g = sg | (sg << 16), s2g8 = sg8 | (sg8 << 16);
        a0[0] = nvfp4_operand(w, 0, s2g), a0[1] = nvfp4_operand(w8, 0, s2g8);
        a0[2] = nvfp4_operand(w, 1, s2g), a0[3] = nvfp4_operand(w8, 1, s2g8);
        a1[0] = nvfp4_operand(w, 2, s2g), a1[1] = nvfp4_operand(w8, 2, s2g8);
        a1[2] = nvfp4_operand(w, 3, s2g), a1[3] = nvfp4_operand(w8, 3, s2g8);
    } else {
        a0[0] = bf16x2_pair<F>(w, 0), a0[1] = bf16x2_pair<F>(w8, 0), a0[2] = bf16x2_pair<F>(w, 1), a0[3] = bf16x2_pair<F>(w8, 1);
        a1[0] = bf16x2_pair<F>(w, 2), a1[1] = bf16x2_pair<F>(w8, 2), a1[2] = bf16x2_pair<F>(w, 3), a1[3] = bf16x2_pair<F>(w8, 3);
    }
}

}  // namespace qs::cuda::w4

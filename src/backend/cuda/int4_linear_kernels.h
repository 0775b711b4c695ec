// Dense linears with INT4 W4A16 (and NVFP4, below) weights for a few rows (decode): y [T, out] = x [T, in] · Wᵀ,
// T in [1, kInt4LinearMaxRows], W in the device INT4 layout (backend/int4_layout.h: u32 codes
// [out, in/8] holding q's two's complement nibbles, bf16 scales [out, in/group]), read once from DRAM
// at half the bytes of FP8. The 4-bit codes are unpacked in registers (one and+xor turns two codes
// into two bf16 values 128 + u with u = q + 8, exact; their fp32 bits minus 136 give q), x is rounded to bf16 as the BF16 GEMM path
// rounds it, fp32 products and sums, the group's scale applied per 8-input word. One warp per RPW
// output rows (RPW 1, 2 or 4: every x load serves RPW rows), lanes stride over 16-byte chunks of the
// row (32 codes). CPU reference: cpu::linear on the dequantised weights (bench/kernels/int4_gemv_lab.cu).
// Larger T: the caller's BF16 copy of the weight (cuBLASLt; not yet a Marlin-style GEMM).
// Included from g++-compiled code: no device-only syntax here.
#pragma once

#include <cstdint>
#include <span>

#include <cuda_runtime.h>

#include "backend/cuda/small_linear_kernels.h"  // SmallLinearOutputNorm

namespace qs::cuda {

constexpr int64_t kInt4LinearMaxRows = 8;

// Whether the kernel takes this call: T in [1, 8], in % 32 == 0, group % 8 == 0 dividing in,
// codes and x 16-byte aligned.
bool int4_linear_supports(int64_t T, int64_t in, int64_t group, const void* codes, const float* x);

// rows_per_warp: 0 = chosen from out (the lab sweeps 1, 2, 4).
void launch_int4_linear(const uint32_t* codes, const uint16_t* scales, int64_t out, int64_t in, int64_t group,
                        const float* x, int64_t T, float* y, cudaStream_t stream, int rows_per_warp = 0);

// NVFP4 weights in the device NVFP4 layout (backend/nvfp4_layout.h: u32 codes [out, in/8] of E2M1
// codes in the INT4 layout's nibble order, the E4M3 block scale bytes [out, in/16], a per-matrix fp32
// `global`) through the same kernel templated on the code format: the codes unpack to their E2M1
// values in registers (int4_unpack.cuh), E2M1 × x and the block scale (exact in fp32) as for INT4,
// y = sum · global (CudaOptions::nvfp4_kernels).
constexpr int64_t kNvfp4LinearGroup = 16;
bool nvfp4_linear_supports(int64_t T, int64_t in, const void* codes, const float* x);
void launch_nvfp4_linear(const uint32_t* codes, const uint8_t* scales, float global, int64_t out, int64_t in,
                         const float* x, int64_t T, float* y, cudaStream_t stream, int rows_per_warp = 0);

// Several 4-bit weights of one input in one launch (CudaOptions::int4_linear_version 2; the q/k/v
// and GDN qkv/z projections): warps take RPW consecutive rows of the weights' concatenated output
// features, so the launch's fixed cost (start, the first round trip, the tail: ~5 µs a launch in a
// one-stream step, bench/kernels/NOTES.md "One stream from a real timeline") is paid once. Every
// output is the same bits as the weight's own launch_int4_linear / launch_nvfp4_linear (a row's
// sums do not depend on the launch's other rows or on RPW). The weights share the format, `in` and
// the group. With `post` (one weight, out = 2,048 or 4,096: o_proj / GDN out_proj) the launch's
// last block to finish also runs the post-attention norm (SmallLinearOutputNorm, as the FP8
// small-rows kernels do: x and h bitwise the norm kernel's after the launch).
constexpr int kInt4LinearMaxParts = 4;
struct Int4LinearPart {
    const uint32_t* codes = nullptr;  // [out, in / 8]
    const void* scales = nullptr;     // INT4: bf16 [out, in / group]; NVFP4: E4M3 bytes [out, in / 16]
    int64_t out = 0;
    float* y = nullptr;               // [T, out]
    float global = 1.0f;              // NVFP4's per-matrix multiplier (INT4: unused)
};
bool int4_linear_output_norm_supports(int64_t T, int64_t out);
void launch_4bit_linears(bool nvfp4, std::span<const Int4LinearPart> parts, int64_t in, int64_t group, const float* x,
                         int64_t T, cudaStream_t stream, const SmallLinearOutputNorm* post = nullptr,
                         int rows_per_warp = 0);

// Version 3 (int4_linear_mma.cu; CudaOptions::int4_linear_version 3): the same launches (several
// weights, the output norm) with the products on tensor cores: mma.sync m16n8k16 on exact bf16
// copies of the codes and of x rounded to bf16, fp32 accumulation, a block of 8 warps per 16 output
// rows splitting `in` by 128-column groups. Every product is version 2's; the fp32 sums run in
// another order (~1e-7 apart). A row's result does not depend on T or on the launch's other rows.
// Needs in a multiple of 128 up to 4,096 and, for INT4, a group multiple of 128 dividing in (one
// scale per MMA); NVFP4 (group 16) folds each 16-column block's scale into the code pairs (exact).
bool int4_linear_mma_supports(bool nvfp4, int64_t T, int64_t in, int64_t group, std::span<const Int4LinearPart> parts,
                              const float* x);
void launch_int4_linears_mma(bool nvfp4, std::span<const Int4LinearPart> parts, int64_t in, int64_t group,
                             const float* x, int64_t T, cudaStream_t stream, const SmallLinearOutputNorm* post = nullptr);

}  // namespace qs::cuda

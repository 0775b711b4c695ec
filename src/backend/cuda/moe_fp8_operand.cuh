// The grouped GEMMs' fp8 weight operand (moe_gemm.cu, moe_decode_gemm.cu): four e4m3 bytes to two
// bf16x2 words by bit moves. Kept out of moe_common.cuh so the CUTLASS translation units, which
// include that header, do not see the PTX wrappers.
#pragma once

#include <cstdint>

#if !defined(QS_MOE_EMULATE)
#include "backend/cuda/ptx_helpers.cuh"  // the emulation shim defines qs::cuda::ptx itself
#endif

namespace qs::cuda::moe {

// e4m3 bytes b0..b3 of w (b0 = lowest k) → lo = bf16x2(b0, b1), hi = bf16x2(b2, b3), times 2^-120
// (exact; moe_common.cuh kFp8AScale / kFp8Unscale say how the factor is undone).
__device__ __forceinline__ void e4m3x4_to_bf16x2_scaled(uint32_t w, uint32_t& lo, uint32_t& hi) {
    // Each 16-bit half becomes [byte, sign-of-byte replicated]; << 4 puts the sign at bit 15, the
    // exponent at bits 10:7 and the mantissa at 6:4; the mask drops the replicas and the bits that
    // the shift carried over from the lower half.
    lo = (ptx::prmt(w, 0x9180u) << 4) & 0x87F087F0u;
    hi = (ptx::prmt(w, 0xB3A2u) << 4) & 0x87F087F0u;
}

}  // namespace qs::cuda::moe

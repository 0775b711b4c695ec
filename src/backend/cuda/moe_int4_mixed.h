// INT4 experts on the prefill path without dequantising them to BF16 (issue 18 item 4;
// MoeParams::int4_prefill_version 2): CUTLASS 4.2's Hopper mixed-input grouped GEMM
// (moe_cutlass_gemm_int4.cu) reads the 4-bit codes and bf16 group scales itself and converts them
// to bf16 in registers before each wgmma (W = q · scale, one bf16 rounding of an exact product:
// the BF16 scratch's values bit for bit).
//  - codes: read in place from the weights. The device INT4 layout (int4_layout.h) stores each
//    code as CUTLASS's int4b_t (4-bit two's complement, input i at bits 4·(i%8) of word i/8, which
//    is byte i/2's low nibble for even i), rows K-contiguous: the GEMM's row-major A as it is.
//  - scales: CUTLASS reads a group's scales contiguous along the output rows, [in/group][out] per
//    matrix; ours are [out][in/group]. launch_moe_int4_mixed_prep transposes them per call into
//    the layer scratch, for the experts with routed rows only: 2/group B per weight (12.6 MB for
//    the real model's layer, against the BF16 scratch's 1.6 GB).
// Included from g++-compiled code: no device-only syntax here.
#pragma once

#include <cstddef>
#include <cstdint>

#include <cuda_runtime.h>

#include "backend/cuda/moe_kernels.h"
#include "core/host_device.h"

namespace qs::cuda {

// The mixed-input GEMMs' operands of one layer: the experts' code tables and where expert e's
// matrix m (0 gate, 1 up, 2 down; e = E the shared expert) has its transposed scales in the
// scratch (e-major, then m).
struct Int4MixedOperands {
    const uint32_t* const* codes[3] = {};  // device tables [E + 1] of u32 words [rows, cols/8]
    unsigned char* scratch = nullptr;
    int E = 0, H = 0, I = 0, I_shared = 0, group = 0;

    QS_HD int64_t ie(int e) const { return e == E ? I_shared : I; }
    // Weights of one matrix of expert e (gate, up and down all have Ie·H).
    QS_HD int64_t matrix_weights(int e) const { return ie(e) * H; }
    // Weights of experts 0..e-1, three matrices each.
    QS_HD int64_t weights_before(int e) const { return int64_t(3) * I * H * (e < E ? e : E); }
    QS_HD int64_t total_weights() const { return weights_before(E) + 3 * matrix_weights(E); }
    // Scratch bytes the scales take (moe_int4_mixed_scratch_bytes).
    QS_HD size_t bytes() const { return size_t(total_weights() / group) * 2; }

    // bf16 bits [cols/group][rows].
    QS_HD uint16_t* scales(int e, int m) const {
        return reinterpret_cast<uint16_t*>(scratch + size_t((weights_before(e) + m * matrix_weights(e)) / group) * 2);
    }
};

// x's mixed-input operands: its code tables, the scales in x's scratch (x.int4_scratch, whose
// x.int4_scratch_bytes moe_int4_mixed_supported checks against moe_int4_mixed_scratch_bytes).
Int4MixedOperands int4_mixed_operands(const MoeExpertTable& x);

// Whether the mixed-input GEMMs cover INT4 experts of these shapes: a group that is a multiple of
// 64 (the GEMM's K tile) dividing H, I and I_shared, all three multiples of 128, and CUTLASS
// compiled in.
bool moe_int4_mixed_covers(int64_t H, int64_t I, int64_t I_shared, int64_t group);
// Whether they cover x: INT4 (not NVFP4) experts without BF16 copies (bf16_in_scratch) whose shapes
// they cover, with a scratch that holds the scales.
bool moe_int4_mixed_supported(const MoeExpertTable& x);
// The scratch bytes the scales of one layer take (Int4MixedOperands::bytes).
size_t moe_int4_mixed_scratch_bytes(int64_t E, int64_t H, int64_t I, int64_t I_shared, int64_t group);

// Enqueues the MN-major scales of x's experts with routed rows (expert_off [E + 2], as
// launch_moe_int4_dequant's) into int4_mixed_operands(x)'s scratch.
void launch_moe_int4_mixed_prep(const MoeExpertTable& x, const int* expert_off, cudaStream_t stream);

}  // namespace qs::cuda

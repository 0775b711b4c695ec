// The MoE block's prefill path on CUTLASS grouped GEMMs (FP8 activations for FP8 experts, bf16 for
// BF16 experts; moe_prefill.cu has the stages). Included from g++-compiled code: no device-only
// syntax here.
#pragma once

#include <cuda_runtime.h>

#include "backend/cuda/moe_kernels.h"

namespace qs::cuda::moe {

// Routed rows per expert (T·k/E) from which launch_moe takes this path (MoeParams::gemm_path = -1),
// per expert format; infinity = never by default. From moe_lab on the H200 (bench/kernels/NOTES.md).
constexpr double kPrefillMinRowsPerExpertFp8 = 96.0;
constexpr double kPrefillMinRowsPerExpertBf16 = 96.0;
inline double prefill_min_rows_per_expert(bool fp8) {
    return fp8 ? kPrefillMinRowsPerExpertFp8 : kPrefillMinRowsPerExpertBf16;
}

// Whether this path can run the call (FP8 or BF16 experts, H, I, I_shared multiples of 128, CUTLASS
// compiled in), and whether launch_moe takes it (MoeParams::gemm_path, tile_config, size).
bool prefill_path_supported(const MoeParams& p);
bool prefill_path_chosen(const MoeParams& p);

// Enqueues the whole MoE block (T > 0) on `stream`; events as launch_moe_profiled's (or null).
void launch_moe_prefill(const MoeParams& p, cudaStream_t stream, cudaEvent_t* ev);

}  // namespace qs::cuda::moe

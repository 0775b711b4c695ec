// The MoE block's prefill path on CUTLASS grouped GEMMs (FP8 activations for FP8 experts, bf16 for
// BF16 experts; moe_prefill.cu has the stages). Included from g++-compiled code: no device-only
// syntax here.
#pragma once

#include <cuda_runtime.h>

#include "backend/cuda/moe_kernels.h"

namespace qs::cuda::moe {

// Routed rows per expert (T·k/E) from which launch_moe takes this path (MoeParams::gemm_path = -1),
// per expert format. moe_lab --prefill on the H200 (2026-12-01, bench/kernels/NOTES.md) measured it
// faster than mma.sync at every size tried, 32 to 512 rows per expert (real model: T = 1,024 to
// 16,384; fp8 344 vs 507 µs at 32, bf16 537 vs 570 µs); smaller calls were not measured and keep
// the mma.sync kernels.
constexpr double kPrefillMinRowsPerExpertFp8 = 32.0;
constexpr double kPrefillMinRowsPerExpertBf16 = 32.0;
inline double prefill_min_rows_per_expert(bool fp8) {
    return fp8 ? kPrefillMinRowsPerExpertFp8 : kPrefillMinRowsPerExpertBf16;
}
// FP8: below this many rows per expert the ping-pong schedule (64×128 tiles) is chosen: 344 vs
// 385 µs at 32 rows per expert, even at 64 (452 vs 450), slower from 128 (696 vs 658 at 4,096 tokens).
constexpr double kPrefillPingpongBelowRowsPerExpert = 48.0;

// Whether this path can run the call (FP8 or BF16 experts, H, I, I_shared multiples of 128, CUTLASS
// compiled in), and whether launch_moe takes it (MoeParams::gemm_path, tile_config, size).
bool prefill_path_supported(const MoeParams& p);
bool prefill_path_chosen(const MoeParams& p);
// Whether this path runs p's INT4 experts on the mixed-input GEMMs (MoeParams::int4_prefill_version 2).
bool prefill_takes_int4_mixed(const MoeParams& p);

// Enqueues the whole MoE block (T > 0) on `stream`; events as launch_moe_profiled's (or null).
void launch_moe_prefill(const MoeParams& p, cudaStream_t stream, cudaEvent_t* ev);

}  // namespace qs::cuda::moe

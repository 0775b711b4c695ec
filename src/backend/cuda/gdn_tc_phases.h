// Lab hook of the GDN prefill versions 2-4 (gdn_tc_*.cu): runs some of their three kernels alone,
// so that bench/kernels/gdn_lab.cu can time each (prep, state pass, output). Not for the engine:
// launch_gated_delta_net runs all three. Kept out of gdn_kernels.h so that only the lab sees it.
#pragma once

#include <cuda_runtime.h>

#include "backend/cuda/gdn_kernels.h"

namespace qs::cuda {

// phases: bit 0 prep (gdn_tc_prep.cu), bit 1 state pass (gdn_tc_state.cu), bit 2 output
// (gdn_tc_out.cu), on the chunked sequences of p (p.prefill_version >= 2, p.chunk_min_tokens > 0;
// the short sequences' serial kernel and the conv are not run). Each phase reads what the earlier
// ones left in p.workspace: time a phase after one full launch_gated_delta_net on the same p.
void launch_gdn_tc_phases(const GatedDeltaNetParams& p, int phases, cudaStream_t stream);

}  // namespace qs::cuda

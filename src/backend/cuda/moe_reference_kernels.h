// The MoE block on CUDA cores in fp32 (same maths as moe_kernels.h, spec §2.5): for expert
// tables in F32 — the reference-precision mode (CudaOptions::reference_precision) and shapes the
// grouped GEMM does not tile (the transformers fixtures' hidden sizes of 32–48). One thread per
// output element, fp32 accumulation in the CPU's order of operations; simple, not fast.
// Included from g++-compiled code: no device-only syntax here.
#pragma once

#include <cstddef>
#include <cstdint>

#include <cuda_runtime.h>

#include "backend/cuda/moe_kernels.h"

namespace qs::cuda {

// Scratch bytes launch_moe_reference needs.
size_t moe_reference_workspace_bytes(int64_t T, int64_t H, int64_t I, int64_t I_shared, int64_t top_k);

// p.experts.format must be kF32 (gate/up/down entries point to fp32 [I_e, H] / [H, I_e]);
// p.workspace holds moe_reference_workspace_bytes. Enqueues 4 launches on `stream`, no sync.
void launch_moe_reference(const MoeParams& p, cudaStream_t stream);

}  // namespace qs::cuda

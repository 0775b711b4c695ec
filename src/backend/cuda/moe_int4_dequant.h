// INT4 W4A16 experts without BF16 copies (CudaOptions::moe_int4_scratch; issue 18): one BF16
// scratch per device holds ONE layer's experts, dequantised from the packed codes
// (backend/int4_layout.h) right before the BF16 grouped GEMMs that have no INT4 kernel (the
// CUTLASS prefill path above int4_grouped_max_t, or the mma.sync path with int4_grouped 0). Every
// layer reuses it: the layers run one after another on one stream. The values are
// int4_layout_row's rounded to bf16 (round to nearest even), bit for bit the BF16 copy the upload
// makes otherwise (DeviceWeights::upload_linear), so the GEMMs and y are unchanged.
// Included from g++-compiled code: no device-only syntax here.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include <cuda_runtime.h>

#include "backend/cuda/moe_kernels.h"

namespace qs::cuda {

// Bytes of one layer's experts in bf16: E routed experts of gate, up [I, H] and down [H, I], and
// the shared one's ([I_shared, H], [H, I_shared]).
size_t moe_int4_scratch_bytes(int64_t E, int64_t H, int64_t I, int64_t I_shared);

// The scratch layout: expert e's gate, up, down one after another (e = 0..E, entry E the shared
// expert), each row-major; writes the E + 1 addresses of each matrix into gate, up, down.
void moe_int4_scratch_pointers(void* scratch, int64_t E, int64_t H, int64_t I, int64_t I_shared,
                               std::vector<const void*>& gate, std::vector<const void*>& up,
                               std::vector<const void*>& down);

// Enqueues the dequantisation of x's INT4 experts (gate_q, up_q, down_q and their scales) into the
// BF16 arrays x.gate, x.up, x.down point to (x.bf16_in_scratch: the scratch's addresses). expert_off:
// null (every expert), or the sorted-row offsets [E + 2] of the call (moe_common.cuh): an expert
// with no routed rows is left as it is (its scratch rows are not read). Needs a group (multiple of
// 8) dividing H, I and I_shared (int4_layout_unsupported's conditions imply it).
// version: the kernel (moe_int4_dequant.cu; the same values): 2 (default; H100, session 42,
// `moe_int4_lab --scratch`: 1,251 µs for the real layer against version 1's 1,580), or 1.
void launch_moe_int4_dequant(const MoeExpertTable& x, const int* expert_off, cudaStream_t stream, int version = 2);

}  // namespace qs::cuda

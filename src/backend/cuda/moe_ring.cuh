// The grouped GEMMs' cp.async ring step (moe_gemm.cu, moe_decode_gemm.cu, moe_decode_gemm_int4.cu).
// Included after ptx_helpers.cuh (or, in the CPU emulation, after the shim that defines qs::cuda::ptx).
#pragma once

namespace qs::cuda::moe {

// Advances a ring of DEPTH copy groups to group i of n: waits until group i has landed, publishes it
// to the whole block (which also frees the slot group i - 1 was read from), then issues group
// i + DEPTH - 1 into slot (i + DEPTH - 1) % DEPTH with load(group, slot) and commits it. Past the
// end the committed group is empty, so every wait counts the same number of groups.
template <int DEPTH, class Load>
__device__ __forceinline__ void ring_advance(int i, int n, Load&& load) {
    ptx::cp_async_wait<DEPTH - 2>();
    __syncthreads();
    const int next = i + DEPTH - 1;
    // (unsigned: next >= 0, and a power-of-two DEPTH then takes one and, not a signed remainder's four)
    if (next < n) load(next, int(unsigned(next) % DEPTH));
    ptx::cp_async_commit();
}

}  // namespace qs::cuda::moe

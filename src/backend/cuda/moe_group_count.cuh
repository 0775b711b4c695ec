// The swapped-operand MoE decode GEMMs' (moe_decode_gemm.cu, moe_decode_gemm_int4.cu) dispatch on a
// tile's valid 8-token groups. Also compiles as host C++ for the CPU emulation (QS_MOE_EMULATE).
#pragma once

#include <type_traits>

namespace qs::cuda::moe {

// Calls f(std::integral_constant<int, n>{}) with n = min(max(groups, 1), NG): a decode tile's
// valid 8-token groups as a compile-time count. The swapped-operand GEMMs run their K loop inside
// f, so its unrolled MMA loops end where the tile's rows do with no branch between one step's
// half and the next: the scheduler may then issue one half's weight unpack and token loads while
// the other's MMAs wait (Nsight Compute, session 43: the INT4 kernel's warps stalled on their own
// dependency chains with half the issue slots idle).
template <int NG, class F>
__device__ __forceinline__ void with_group_count(int groups, F&& f) {
    if constexpr (NG > 1) {
        if (groups < NG) {
            with_group_count<NG - 1>(groups, f);
            return;
        }
    }
    f(std::integral_constant<int, NG>{});
}

}  // namespace qs::cuda::moe

// What the two CUTLASS grouped-GEMM translation units (moe_cutlass_gemm.cu: FP8 blockwise;
// moe_cutlass_gemm_bf16.cu: BF16) share: the typed view of the device-side group arrays, the
// cached SM count, the plain epilogue arguments (D = accumulator: alpha 1, beta 0, no C) and the
// workspace check / can_implement / initialize / run sequence. Included only by those two files,
// after their CUTLASS includes (moe_cutlass.h stays free of CUTLASS: g++ code includes it).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <string>
#include <type_traits>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/device_limits.h"
#include "backend/cuda/moe_common.cuh"
#include "backend/cuda/moe_cutlass.h"
#include "core/check.h"

namespace qs::cuda::moe {

// Whether a grouped GEMM kernel type fits the group arrays (moe_cutlass.h): a problem shape is
// three ints, and each of A's, B's and D's strides is one 64-bit leading dimension.
template <class GemmKernel>
constexpr bool fits_group_arrays() {
    using Shape3 = typename GemmKernel::ProblemShape::UnderlyingProblemShape;
    using StrideA = typename GemmKernel::InternalStrideA;
    return sizeof(Shape3) == 3 * sizeof(int) && std::is_same_v<StrideA, cute::Stride<int64_t, cute::_1, cute::_0>> &&
           std::is_same_v<typename GemmKernel::InternalStrideB, StrideA> &&
           std::is_same_v<typename GemmKernel::InternalStrideD, StrideA>;
}

// The array at byte offset off of the group arrays (GroupedArrayLayout), typed.
template <class T>
__host__ __device__ inline T* at(void* base, size_t off) {
    return reinterpret_cast<T*>(static_cast<unsigned char*>(base) + off);
}

// The epilogue and hardware-info arguments of a grouped GEMM whose groups start at first_group of
// the group arrays: D = accumulator (alpha 1, beta 0, no C; dC set to D's strides all the same),
// D's pointers and strides from the arrays, the current device with all of its SMs.
template <class Gemm>
void set_plain_epilogue(typename Gemm::Arguments& args, void* arrays, const GroupedArrayLayout& L, int first_group) {
    using StrideD = typename Gemm::GemmKernel::InternalStrideD;
    using PtrD = decltype(args.epilogue.ptr_D);
    auto& fusion = args.epilogue.thread;
    fusion.alpha = 1.0f;
    fusion.beta = 0.0f;
    fusion.alpha_ptr = nullptr;
    fusion.beta_ptr = nullptr;
    fusion.alpha_ptr_array = nullptr;
    fusion.beta_ptr_array = nullptr;
    fusion.dAlpha = {cute::_0{}, cute::_0{}, 0};
    fusion.dBeta = {cute::_0{}, cute::_0{}, 0};
    args.epilogue.ptr_C = nullptr;
    args.epilogue.dC = at<StrideD>(arrays, L.sd) + first_group;
    args.epilogue.ptr_D = reinterpret_cast<PtrD>(at<void*>(arrays, L.d) + first_group);
    args.epilogue.dD = at<StrideD>(arrays, L.sd) + first_group;
    args.hw_info.device_id = current_device();
    args.hw_info.sm_count = sm_count();
}

// Checks the workspace bound and can_implement, then initializes and launches on stream; a failure
// aborts with "<name>: <what failed>".
template <class Gemm>
void run_grouped_gemm(const typename Gemm::Arguments& args, void* workspace, cudaStream_t stream, const char* name) {
    auto msg = [name](const char* what) { return std::string(name) + ": " + what; };
    QS_CHECK_MSG(Gemm::get_workspace_size(args) <= kGroupedGemmWorkspaceBytes,
                 msg("CUTLASS workspace larger than reserved").c_str());
    Gemm gemm;
    QS_CHECK_MSG(gemm.can_implement(args) == cutlass::Status::kSuccess, msg("can_implement failed").c_str());
    QS_CHECK_MSG(gemm.initialize(args, workspace, stream) == cutlass::Status::kSuccess,
                 msg("initialize failed").c_str());
    QS_CHECK_MSG(gemm.run(stream) == cutlass::Status::kSuccess, msg("launch failed").c_str());
    QS_CUDA_CHECK_LAUNCH();
}

}  // namespace qs::cuda::moe

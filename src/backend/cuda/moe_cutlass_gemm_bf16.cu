// The MoE prefill grouped GEMMs for BF16 experts (interface and group layout: moe_cutlass.h) on
// CUTLASS 4.2's Hopper pointer-array grouped GEMM: TMA loads, wgmma bf16 → fp32, warp-specialised
// cooperative schedule on a 128×256×64 tile (two consumer warpgroups of 64 rows), clusters of two
// CTAs along N, persistent group tile scheduler, bf16 D by a TMA-store epilogue (D = accumulator).
// It reads the same device-side group arrays as the FP8 GEMM (moe_cutlass_gemm.cu writes them with
// its setup kernel; the scale pointers are unused here). The second and last CUTLASS translation
// unit (system-header include, like the first); the epilogue arguments and the launch sequence
// both share are in moe_cutlass_launch.cuh.
#include "backend/cuda/moe_cutlass.h"

#include "core/check.h"

#if defined(QS_HAVE_CUTLASS)

#include <cutlass/cutlass.h>
#include <cutlass/numeric_types.h>
#include <cute/tensor.hpp>
#include <cutlass/epilogue/collective/collective_builder.hpp>
#include <cutlass/epilogue/dispatch_policy.hpp>
#include <cutlass/gemm/collective/collective_builder.hpp>
#include <cutlass/gemm/device/gemm_universal_adapter.h>
#include <cutlass/gemm/dispatch_policy.hpp>
#include <cutlass/gemm/group_array_problem_shape.hpp>
#include <cutlass/gemm/kernel/gemm_universal.hpp>
#include <cutlass/kernel_hardware_info.h>

#include "backend/cuda/moe_cutlass_launch.cuh"

namespace qs::cuda::moe {
namespace {

using namespace cute;

using ProblemShape = cutlass::gemm::GroupProblemShape<Shape<int, int, int>>;
using Element = cutlass::bfloat16_t;
using LayoutA = cutlass::layout::RowMajor;     // activations [M, K]
using LayoutB = cutlass::layout::ColumnMajor;  // weights [N, K] row-major
using LayoutD = cutlass::layout::RowMajor;
constexpr int kAlign = 8;                      // elements (16 bytes)
using TileShape = Shape<_128, _256, _64>;
using ClusterShape = Shape<_1, _2, _1>;

using CollectiveEpilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
    cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, TileShape, ClusterShape,
    cutlass::epilogue::collective::EpilogueTileAuto, float, float,
    void, LayoutD*, kAlign,  // no C
    Element, LayoutD*, kAlign, cutlass::epilogue::PtrArrayTmaWarpSpecializedCooperative,
    cutlass::epilogue::fusion::LinearCombination<Element, float, void, float>>::CollectiveOp;

using CollectiveMainloop = typename cutlass::gemm::collective::CollectiveBuilder<
    cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, Element, LayoutA*, kAlign, Element, LayoutB*, kAlign, float,
    TileShape, ClusterShape,
    cutlass::gemm::collective::StageCountAutoCarveout<static_cast<int>(sizeof(typename CollectiveEpilogue::SharedStorage))>,
    cutlass::gemm::KernelPtrArrayTmaWarpSpecializedCooperative>::CollectiveOp;

using GemmKernel = cutlass::gemm::kernel::GemmUniversal<ProblemShape, CollectiveMainloop, CollectiveEpilogue>;
using Gemm = cutlass::gemm::device::GemmUniversalAdapter<GemmKernel>;

using Shape3 = ProblemShape::UnderlyingProblemShape;
using StrideA = typename GemmKernel::InternalStrideA;
using StrideB = typename GemmKernel::InternalStrideB;
static_assert(fits_group_arrays<GemmKernel>(), "problem shapes: three ints; one 64-bit leading dimension per stride");

}  // namespace

void launch_grouped_gemm_bf16(const GroupedSetupParams& p, bool gate_up, void* workspace, cudaStream_t stream) {
    QS_CHECK(p.act_bytes == 2);
    const GroupedArrayLayout L = grouped_array_layout(p.E);
    const int first = gate_up ? 0 : 2 * (p.E + 1);
    const int groups = gate_up ? 2 * (p.E + 1) : p.E + 1;
    Gemm::Arguments args;
    args.mode = cutlass::gemm::GemmUniversalMode::kGrouped;
    args.problem_shape = {groups, at<Shape3>(p.arrays, L.shapes) + first, nullptr};  // device-only shapes
    args.mainloop = {reinterpret_cast<const Element**>(at<const void*>(p.arrays, L.a) + first),
                     at<StrideA>(p.arrays, L.sa) + first,
                     reinterpret_cast<const Element**>(at<const void*>(p.arrays, L.b) + first),
                     at<StrideB>(p.arrays, L.sb) + first};
    set_plain_epilogue<Gemm>(args, p.arrays, L, first);
    run_grouped_gemm<Gemm>(args, workspace, stream, "moe grouped GEMM (bf16)");
}

}  // namespace qs::cuda::moe

#else  // !QS_HAVE_CUTLASS

namespace qs::cuda::moe {
void launch_grouped_gemm_bf16(const GroupedSetupParams&, bool, void*, cudaStream_t) {
    QS_CHECK_MSG(false, "moe grouped GEMM: built without CUTLASS (run scripts/setup_cutlass.sh and reconfigure)");
}
}  // namespace qs::cuda::moe

#endif

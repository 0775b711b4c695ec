// The MoE prefill grouped GEMMs (interface and group layout: moe_cutlass.h) on CUTLASS 4.2's
// Hopper pointer-array grouped GEMM: TMA loads, wgmma, warp-specialised (one producer warpgroup,
// two consumer warpgroups: cooperative on a 128×128×128 tile, or ping-pong on 64×128×128 tiles,
// chosen by GroupedSetupParams::pingpong), clusters of two CTAs along N, persistent group tile
// scheduler, FP8 e4m3 operands with blockwise scaling (A: one scale per row and 128 columns,
// B: one per 128×128 block; both K-major, which is the checkpoint's scale_inv layout, so the
// weight scales are used as uploaded), fp32 accumulation promoted per 128-wide K block, bf16 D by
// a TMA-store epilogue (D = accumulator: alpha 1, no C). Problem shapes, pointers and strides live
// only on the device (written by moe_grouped_setup_kernel from the sort's expert offsets): the
// host passes the group count and the arrays, so the launch is CUDA-graph capturable.
// One of the two translation units that include CUTLASS (with moe_cutlass_gemm_bf16.cu), as system
// headers (their warnings are not ours); one GEMM type per schedule serves both GEMMs. The
// epilogue arguments and the launch sequence both units share: moe_cutlass_launch.cuh.
#include "backend/cuda/moe_cutlass.h"

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/moe_common.cuh"
#include "core/check.h"

#if defined(QS_HAVE_CUTLASS)

#include <type_traits>

#include <cuda_bf16.h>
#include <cutlass/cutlass.h>
#include <cutlass/numeric_types.h>
#include <cute/tensor.hpp>
#include <cutlass/detail/blockwise_scale_layout.hpp>
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

using ProblemShape = cutlass::gemm::GroupProblemShape<Shape<int, int, int>>;  // per group {M, N, K}
using ElementA = cutlass::float_e4m3_t;
using ElementB = cutlass::float_e4m3_t;
using ElementD = cutlass::bfloat16_t;
using LayoutA = cutlass::layout::RowMajor;     // activations [M, K]
using LayoutB = cutlass::layout::ColumnMajor;  // weights [N, K] row-major
using LayoutD = cutlass::layout::RowMajor;
constexpr int kAlignAB = 16;                   // elements (16 bytes)
constexpr int kAlignD = 8;
using ClusterShape = Shape<_1, _2, _1>;        // the two CTAs of a cluster share A tiles (TMA multicast)
using ScaleConfig = cutlass::detail::Sm90BlockwiseScaleConfig<1, 128, 128, cute::GMMA::Major::K, cute::GMMA::Major::K>;
using LayoutSFA = decltype(ScaleConfig::deduce_layoutSFA());
using LayoutSFB = decltype(ScaleConfig::deduce_layoutSFB());

// Two schedules: cooperative (two consumer warpgroups share a 128×128 tile) and ping-pong (each
// consumer warpgroup owns a 64×128 tile; one's epilogue overlaps the other's MMAs: K is only 4
// blocks deep in the down GEMM). The 128-wide K tile is one scale block.
template <class TileShape, class MainloopSchedule, class EpilogueSchedule>
struct Fp8Grouped {
    using CollectiveEpilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
        cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, TileShape, ClusterShape,
        cutlass::epilogue::collective::EpilogueTileAuto, float, float,
        void, LayoutD*, kAlignD,  // no C
        ElementD, LayoutD*, kAlignD, EpilogueSchedule,
        cutlass::epilogue::fusion::LinearCombination<ElementD, float, void, float>>::CollectiveOp;

    using CollectiveMainloop = typename cutlass::gemm::collective::CollectiveBuilder<
        cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, ElementA, cute::tuple<LayoutA*, LayoutSFA*>, kAlignAB,
        ElementB, cute::tuple<LayoutB*, LayoutSFB*>, kAlignAB, float, TileShape, ClusterShape,
        cutlass::gemm::collective::StageCountAutoCarveout<static_cast<int>(sizeof(typename CollectiveEpilogue::SharedStorage))>,
        MainloopSchedule>::CollectiveOp;

    using GemmKernel = cutlass::gemm::kernel::GemmUniversal<ProblemShape, CollectiveMainloop, CollectiveEpilogue>;
    using Gemm = cutlass::gemm::device::GemmUniversalAdapter<GemmKernel>;
};
using Cooperative = Fp8Grouped<Shape<_128, _128, _128>, cutlass::gemm::KernelPtrArrayTmaWarpSpecializedCooperativeFP8Blockwise,
                               cutlass::epilogue::PtrArrayTmaWarpSpecializedCooperative>;
using Pingpong = Fp8Grouped<Shape<_64, _128, _128>, cutlass::gemm::KernelPtrArrayTmaWarpSpecializedPingpongFP8Blockwise,
                            cutlass::epilogue::PtrArrayTmaWarpSpecializedPingpong>;
using GemmKernel = Cooperative::GemmKernel;
static_assert(std::is_same_v<GemmKernel::InternalStrideA, Pingpong::GemmKernel::InternalStrideA>);

using Shape3 = ProblemShape::UnderlyingProblemShape;
using StrideA = typename GemmKernel::InternalStrideA;
using StrideB = typename GemmKernel::InternalStrideB;
using StrideD = typename GemmKernel::InternalStrideD;

static_assert(fits_group_arrays<GemmKernel>(), "problem shapes: three ints; one 64-bit leading dimension per stride");
using ArrayLayout = GroupedArrayLayout;

ArrayLayout array_layout(int E) { return grouped_array_layout(E); }

template <class S>
__device__ S row_stride(int64_t ld) {
    S s{};
    cute::get<0>(s) = ld;  // row-major M×K / column-major K×N / row-major M×N: the one dynamic stride
    return s;
}

// One thread per expert e (E + 1 threads): gate_up groups 2e, 2e+1 and down group 2(E+1) + e.
__global__ void moe_grouped_setup_kernel(GroupedSetupParams p, ArrayLayout L) {
    const int e = blockIdx.x * blockDim.x + threadIdx.x;
    if (e > p.E) return;
    const int imax = p.I > p.I_shared ? p.I : p.I_shared;
    const int ie = e == p.E ? p.I_shared : p.I;
    const int off = p.expert_off[e];
    const int m = p.expert_off[e + 1] - off;
    const int routed_rows = p.expert_off[p.E];
    Shape3* shapes = at<Shape3>(p.arrays, L.shapes);
    const void** a = at<const void*>(p.arrays, L.a);
    const void** b = at<const void*>(p.arrays, L.b);
    const float** sfa = at<const float*>(p.arrays, L.sfa);
    const float** sfb = at<const float*>(p.arrays, L.sfb);
    void** d = at<void*>(p.arrays, L.d);
    StrideA* sa = at<StrideA>(p.arrays, L.sa);
    StrideB* sb = at<StrideB>(p.arrays, L.sb);
    StrideD* sd = at<StrideD>(p.arrays, L.sd);
    const size_t r0 = size_t(off);
    __nv_bfloat16* gu = static_cast<__nv_bfloat16*>(p.gu);
    const size_t ab = size_t(p.act_bytes);
    for (int h = 0; h < 2; ++h) {
        const int g = 2 * e + h;
        shapes[g] = cute::make_shape(m, ie, p.H);
        a[g] = p.a8 + r0 * p.H * ab;
        sfa[g] = p.sfa ? p.sfa + r0 * (p.H / 128) : nullptr;
        b[g] = h == 0 ? p.gate[e] : p.up[e];
        sfb[g] = p.gate_scale ? (h == 0 ? p.gate_scale[e] : p.up_scale[e]) : nullptr;
        d[g] = gu + r0 * 2 * imax + (h == 0 ? 0 : imax);
        sa[g] = row_stride<StrideA>(p.H);
        sb[g] = row_stride<StrideB>(p.H);
        sd[g] = row_stride<StrideD>(2 * imax);
    }
    const int g = 2 * (p.E + 1) + e;
    shapes[g] = cute::make_shape(m, p.H, ie);
    a[g] = p.h8 + r0 * imax * ab;
    // Routed rows carry I/128 scales each; the shared expert's rows follow them with I_shared/128.
    sfa[g] = !p.sfh ? nullptr : e < p.E ? p.sfh + r0 * (p.I / 128) : p.sfh + size_t(routed_rows) * (p.I / 128);
    b[g] = p.down[e];
    sfb[g] = p.down_scale ? p.down_scale[e] : nullptr;
    d[g] = static_cast<__nv_bfloat16*>(p.eo) + r0 * p.H;
    sa[g] = row_stride<StrideA>(imax);
    sb[g] = row_stride<StrideB>(ie);
    sd[g] = row_stride<StrideD>(p.H);
}

template <class Gemm>
typename Gemm::Arguments make_args(const GroupedSetupParams& p, int first_group, int groups) {
    const ArrayLayout L = array_layout(p.E);
    typename Gemm::Arguments args;
    args.mode = cutlass::gemm::GemmUniversalMode::kGrouped;
    args.problem_shape = {groups, at<Shape3>(p.arrays, L.shapes) + first_group, nullptr};  // device-only shapes
    args.mainloop = {reinterpret_cast<const ElementA**>(at<const void*>(p.arrays, L.a) + first_group),
                     at<StrideA>(p.arrays, L.sa) + first_group,
                     reinterpret_cast<const ElementB**>(at<const void*>(p.arrays, L.b) + first_group),
                     at<StrideB>(p.arrays, L.sb) + first_group,
                     at<const float*>(p.arrays, L.sfa) + first_group,
                     nullptr,  // the collective derives each group's scale layout from its shape
                     at<const float*>(p.arrays, L.sfb) + first_group,
                     nullptr};
    set_plain_epilogue<Gemm>(args, p.arrays, L, first_group);
    return args;
}

template <class Gemm>
void run_one(const GroupedSetupParams& p, int first_group, int groups, void* workspace, cudaStream_t stream) {
    run_grouped_gemm<Gemm>(make_args<Gemm>(p, first_group, groups), workspace, stream, "moe grouped GEMM");
}

void run(const GroupedSetupParams& p, int first_group, int groups, void* workspace, cudaStream_t stream) {
    if (p.pingpong) run_one<Pingpong::Gemm>(p, first_group, groups, workspace, stream);
    else run_one<Cooperative::Gemm>(p, first_group, groups, workspace, stream);
}

}  // namespace

bool cutlass_grouped_gemm_compiled() { return true; }

size_t grouped_arrays_bytes(int E) { return array_layout(E).total; }

size_t grouped_gemm_workspace_bytes() { return kGroupedGemmWorkspaceBytes; }

void launch_grouped_setup(const GroupedSetupParams& p, cudaStream_t stream) {
    const int n = p.E + 1;
    QS_CHECK_MSG(grouped_arrays_bytes(p.E) <= kGroupedArraysBytesPerGroup * size_t(3 * n) + 10 * 256,
                 "moe grouped GEMM: group arrays larger than reserved");
    moe_grouped_setup_kernel<<<(n + 127) / 128, 128, 0, stream>>>(p, array_layout(p.E));
    QS_CUDA_CHECK_LAUNCH();
}

void launch_grouped_gemm_gate_up(const GroupedSetupParams& p, void* workspace, cudaStream_t stream) {
    run(p, 0, 2 * (p.E + 1), workspace, stream);
}

void launch_grouped_gemm_down(const GroupedSetupParams& p, void* workspace, cudaStream_t stream) {
    run(p, 2 * (p.E + 1), p.E + 1, workspace, stream);
}

}  // namespace qs::cuda::moe

#else  // !QS_HAVE_CUTLASS: compiled without the headers; launch_moe never takes this path.

namespace qs::cuda::moe {

bool cutlass_grouped_gemm_compiled() { return false; }
size_t grouped_arrays_bytes(int) { return 0; }
size_t grouped_gemm_workspace_bytes() { return 0; }
void launch_grouped_setup(const GroupedSetupParams&, cudaStream_t) {
    QS_CHECK_MSG(false, "moe grouped GEMM: built without CUTLASS (run scripts/setup_cutlass.sh and reconfigure)");
}
void launch_grouped_gemm_gate_up(const GroupedSetupParams& p, void*, cudaStream_t s) { launch_grouped_setup(p, s); }
void launch_grouped_gemm_down(const GroupedSetupParams& p, void*, cudaStream_t s) { launch_grouped_setup(p, s); }

}  // namespace qs::cuda::moe

#endif

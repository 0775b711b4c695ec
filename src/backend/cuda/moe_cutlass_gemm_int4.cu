// The MoE prefill grouped GEMMs for INT4 experts (moe_int4_mixed.h; interface: moe_cutlass.h) on
// CUTLASS 4.2's Hopper mixed-input pointer-array grouped GEMM: TMA loads of the 4-bit codes, their
// bf16 group scales and the bf16 activations, the codes converted to bf16 and multiplied by their
// scale in registers (one bf16 rounding of an exact product: the BF16 scratch's value) and fed to
// wgmma as the register-sourced operand, fp32 accumulation, warp-specialised cooperative schedule on
// 128×128×64 (or 128×256×64) tiles, persistent group tile scheduler, bf16 D by a TMA-store epilogue.
// wgmma takes a register operand only as A, so each group computes D^T = W · X^T: M = the weight's
// rows (the output columns), N = the group's token rows, K the reduction; D^T column-major with the
// leading dimension of our row-major outputs is exactly their layout. Three tile configurations
// (MoeParams::int4_mixed_tile; by default chosen by rows per expert), the same sums in the same order. The group arrays are the
// FP8 GEMM's (moe_cutlass.h) with this kernel's stride types and the scale strides in ss.
// The third translation unit that includes CUTLASS (system headers, as the other two).
#include "backend/cuda/moe_cutlass.h"

#include "backend/cuda/moe_int4_mixed.h"
#include "core/check.h"

#if defined(QS_HAVE_CUTLASS)

#include <type_traits>

#include <cuda_bf16.h>
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

using ProblemShape = cutlass::gemm::GroupProblemShape<Shape<int, int, int>>;  // per group {rows of W, tokens, K}
using ElementW = cutlass::int4b_t;
using ElementScale = cutlass::bfloat16_t;
using ElementX = cutlass::bfloat16_t;
using ElementD = cutlass::bfloat16_t;
using LayoutW = cutlass::layout::RowMajor;     // A: weights [rows, K], K contiguous
using LayoutX = cutlass::layout::ColumnMajor;  // B: K × tokens, K contiguous (our [tokens, K] rows)
using LayoutD = cutlass::layout::ColumnMajor;  // D^T: rows × tokens, rows contiguous (our [tokens, ld])
constexpr int kAlignW = 32;                    // elements (16 bytes)
constexpr int kAlignX = 8;
constexpr int kAlignD = 8;
// The GEMM type per tile shape (weight rows × token rows × K) and cluster (MoeParams::int4_mixed_tile).
template <class TileShape, class ClusterShape>
struct Int4Grouped {
    using CollectiveEpilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
        cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, TileShape, ClusterShape,
        cutlass::epilogue::collective::EpilogueTileAuto, float, float,
        void, LayoutD*, kAlignD,  // no C
        ElementD, LayoutD*, kAlignD, cutlass::epilogue::PtrArrayTmaWarpSpecializedCooperative,
        cutlass::epilogue::fusion::LinearCombination<ElementD, float, void, float>>::CollectiveOp;

    using CollectiveMainloop = typename cutlass::gemm::collective::CollectiveBuilder<
        cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, cute::tuple<ElementW, ElementScale>, LayoutW*, kAlignW,
        ElementX, LayoutX*, kAlignX, float, TileShape, ClusterShape,
        cutlass::gemm::collective::StageCountAutoCarveout<static_cast<int>(sizeof(typename CollectiveEpilogue::SharedStorage))>,
        cutlass::gemm::KernelPtrArrayTmaWarpSpecializedCooperative>::CollectiveOp;

    using GemmKernel = cutlass::gemm::kernel::GemmUniversal<ProblemShape, CollectiveMainloop, CollectiveEpilogue>;
    using Gemm = cutlass::gemm::device::GemmUniversalAdapter<GemmKernel>;
};
// 0: 128 × 128 tiles; 1: 128 × 256 (each converted weight fragment feeds twice the MMAs); 2: 128 ×
// 256 in clusters of two CTAs along the weight rows (the token tile multicast to both).
using Tile128 = Int4Grouped<Shape<_128, _128, _64>, Shape<_1, _1, _1>>;
using Tile256 = Int4Grouped<Shape<_128, _256, _64>, Shape<_1, _1, _1>>;
using Tile256C2 = Int4Grouped<Shape<_128, _256, _64>, Shape<_2, _1, _1>>;
using GemmKernel = Tile128::GemmKernel;
using CollectiveMainloop = Tile128::CollectiveMainloop;
static_assert(std::is_same_v<GemmKernel::InternalStrideA, Tile256::GemmKernel::InternalStrideA> &&
              std::is_same_v<GemmKernel::InternalStrideD, Tile256C2::GemmKernel::InternalStrideD> &&
              std::is_same_v<CollectiveMainloop::NonVoidStrideScale, Tile256C2::CollectiveMainloop::NonVoidStrideScale>);

using Shape3 = ProblemShape::UnderlyingProblemShape;
using StrideW = typename GemmKernel::InternalStrideA;
using StrideX = typename GemmKernel::InternalStrideB;
using StrideD = typename GemmKernel::InternalStrideD;
using StrideS = typename CollectiveMainloop::NonVoidStrideScale;
static_assert(sizeof(Shape3) == 3 * sizeof(int));
static_assert(std::is_same_v<StrideW, cute::Stride<int64_t, cute::_1, cute::_0>>, "weights: one leading dimension");
static_assert(std::is_same_v<StrideX, cute::Stride<int64_t, cute::_1, cute::_0>>, "activations: one leading dimension");
static_assert(std::is_same_v<StrideD, cute::Stride<cute::_1, int64_t, cute::_0>>, "D^T: one leading dimension");
static_assert(std::is_same_v<StrideS, cute::Stride<cute::_1, int64_t, int64_t>>, "scales: MN-major");
static_assert(sizeof(StrideS) == 2 * sizeof(int64_t));

// One thread per expert e (E + 1 threads): gate_up groups 2e, 2e+1 and down group 2(E+1) + e.
__global__ void moe_grouped_setup_int4_kernel(GroupedSetupParams p, Int4MixedOperands s, GroupedArrayLayout L) {
    const int e = blockIdx.x * blockDim.x + threadIdx.x;
    if (e > p.E) return;
    const int imax = p.I > p.I_shared ? p.I : p.I_shared;
    const int ie = e == p.E ? p.I_shared : p.I;
    const int off = p.expert_off[e];
    const int m = p.expert_off[e + 1] - off;
    Shape3* shapes = at<Shape3>(p.arrays, L.shapes);
    const void** a = at<const void*>(p.arrays, L.a);
    const void** b = at<const void*>(p.arrays, L.b);
    const void** sc = at<const void*>(p.arrays, L.sfa);
    void** d = at<void*>(p.arrays, L.d);
    StrideW* sa = at<StrideW>(p.arrays, L.sa);
    StrideX* sb = at<StrideX>(p.arrays, L.sb);
    StrideD* sd = at<StrideD>(p.arrays, L.sd);
    StrideS* ss = at<StrideS>(p.arrays, L.ss);
    const size_t r0 = size_t(off);
    const __nv_bfloat16* x = reinterpret_cast<const __nv_bfloat16*>(p.a8);
    const __nv_bfloat16* h = reinterpret_cast<const __nv_bfloat16*>(p.h8);
    __nv_bfloat16* gu = static_cast<__nv_bfloat16*>(p.gu);
    auto set = [&](int g, int rows, int k, int mat, const __nv_bfloat16* act, int64_t ld_act, __nv_bfloat16* out,
                   int64_t ld_out) {
        shapes[g] = cute::make_shape(rows, m, k);
        a[g] = s.codes[mat][e];
        sc[g] = s.scales(e, mat);
        b[g] = act;
        d[g] = out;
        sa[g] = StrideW{};
        cute::get<0>(sa[g]) = k;
        sb[g] = StrideX{};
        cute::get<0>(sb[g]) = ld_act;
        sd[g] = StrideD{};
        cute::get<1>(sd[g]) = ld_out;
        ss[g] = StrideS{};
        cute::get<1>(ss[g]) = rows;  // a group's scales: contiguous over the weight's rows
        cute::get<2>(ss[g]) = 0;
    };
    for (int hh = 0; hh < 2; ++hh)
        set(2 * e + hh, ie, p.H, hh, x + r0 * p.H, p.H, gu + r0 * 2 * imax + (hh == 0 ? 0 : imax), 2 * imax);
    set(2 * (p.E + 1) + e, p.H, ie, 2, h + r0 * imax, imax, static_cast<__nv_bfloat16*>(p.eo) + r0 * p.H, p.H);
}

}  // namespace

void launch_grouped_setup_int4(const GroupedSetupParams& p, const Int4MixedOperands& s, cudaStream_t stream) {
    QS_CHECK(p.act_bytes == 2);
    const int n = p.E + 1;
    QS_CHECK_MSG(grouped_arrays_bytes(p.E) <= kGroupedArraysBytesPerGroup * size_t(3 * n) + 10 * 256,
                 "moe grouped GEMM (int4): group arrays larger than reserved");
    moe_grouped_setup_int4_kernel<<<(n + 127) / 128, 128, 0, stream>>>(p, s, grouped_array_layout(p.E));
    QS_CUDA_CHECK_LAUNCH();
}

namespace {

template <class Gemm>
void run_int4(const GroupedSetupParams& p, bool gate_up, int group, void* workspace, cudaStream_t stream) {
    const GroupedArrayLayout L = grouped_array_layout(p.E);
    const int first = gate_up ? 0 : 2 * (p.E + 1);
    const int groups = gate_up ? 2 * (p.E + 1) : p.E + 1;
    typename Gemm::Arguments args;
    args.mode = cutlass::gemm::GemmUniversalMode::kGrouped;
    args.problem_shape.num_groups = groups;
    args.problem_shape.problem_shapes = at<Shape3>(p.arrays, L.shapes) + first;
    args.problem_shape.host_problem_shapes = nullptr;  // device-only shapes
    args.mainloop.ptr_A = reinterpret_cast<const ElementW**>(at<const void*>(p.arrays, L.a) + first);
    args.mainloop.dA = at<StrideW>(p.arrays, L.sa) + first;
    args.mainloop.ptr_B = reinterpret_cast<const ElementX**>(at<const void*>(p.arrays, L.b) + first);
    args.mainloop.dB = at<StrideX>(p.arrays, L.sb) + first;
    args.mainloop.ptr_S = reinterpret_cast<const ElementScale**>(at<const void*>(p.arrays, L.sfa) + first);
    args.mainloop.dS = at<StrideS>(p.arrays, L.ss) + first;
    args.mainloop.chunk_size = group;
    args.mainloop.ptr_Z = nullptr;
    set_plain_epilogue<Gemm>(args, p.arrays, L, first);
    run_grouped_gemm<Gemm>(args, workspace, stream, "moe grouped GEMM (int4 mixed input)");
}

}  // namespace

void launch_grouped_gemm_int4(const GroupedSetupParams& p, bool gate_up, int group, int tile, void* workspace,
                              cudaStream_t stream) {
    QS_CHECK(p.act_bytes == 2);
    QS_CHECK_MSG(tile >= 0 && tile <= 2, "moe grouped GEMM (int4): tile must be 0, 1 or 2");
    if (tile == 0) run_int4<Tile128::Gemm>(p, gate_up, group, workspace, stream);
    else if (tile == 1) run_int4<Tile256::Gemm>(p, gate_up, group, workspace, stream);
    else run_int4<Tile256C2::Gemm>(p, gate_up, group, workspace, stream);
}

}  // namespace qs::cuda::moe

#else  // !QS_HAVE_CUTLASS

namespace qs::cuda::moe {
void launch_grouped_setup_int4(const GroupedSetupParams&, const Int4MixedOperands&, cudaStream_t) {
    QS_CHECK_MSG(false, "moe grouped GEMM: built without CUTLASS (run scripts/setup_cutlass.sh and reconfigure)");
}
void launch_grouped_gemm_int4(const GroupedSetupParams&, bool, int, int, void*, cudaStream_t) {
    QS_CHECK_MSG(false, "moe grouped GEMM: built without CUTLASS (run scripts/setup_cutlass.sh and reconfigure)");
}
}  // namespace qs::cuda::moe

#endif

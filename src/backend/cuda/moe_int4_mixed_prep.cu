// The mixed-input GEMMs' scales of one layer's INT4 experts (moe_int4_mixed.h): [rows][in/group]
// → [in/group][rows] in the layer scratch. One thread per weight row: it reads the row's scales
// (contiguous: a warp reads one contiguous span) and writes each at its group's line (consecutive
// threads on consecutive rows: coalesced stores). grid (blocks over the largest matrix's rows,
// 3·(E + 1)), blockIdx.y = expert·3 + matrix. 12.6 MB read and written for the real layer. (Until
// the device layout stored int4b_t codes, this kernel also rewrote the 0.4 GB of codes: 443 µs on
// an H100.)
// Compiles as host C++ too (QS_MOE_EMULATE: bench/kernels/moe_int4_mixed_prep_emu.cpp).
#include "backend/cuda/moe_int4_mixed.h"

#include <algorithm>

#include "backend/cuda/moe_cutlass.h"
#include "core/check.h"
#if !defined(QS_MOE_EMULATE)
#include "backend/cuda/cuda_check.h"
#endif

namespace qs::cuda {
namespace moe {

constexpr int kMixedPrepThreads = 256;

struct MixedPrepParams {
    const void* const* qs[3];  // gate, up, down bf16 scales [E + 1] of [rows, cols/group] (INT4 only)
    const int* expert_off;     // optional [E + 2]
    Int4MixedOperands out;
};

__global__ void __launch_bounds__(kMixedPrepThreads) moe_int4_mixed_prep_kernel(MixedPrepParams p) {
    const int e = int(blockIdx.y) / 3, m = int(blockIdx.y) % 3;
    if (p.expert_off != nullptr && p.expert_off[e + 1] == p.expert_off[e]) return;  // no rows: not read
    const Int4MixedOperands& s = p.out;
    const int rows = m == 2 ? s.H : int(s.ie(e));
    const int cols = m == 2 ? int(s.ie(e)) : s.H;
    const int n = int(blockIdx.x) * kMixedPrepThreads + int(threadIdx.x);
    if (n >= rows) return;
    const int groups = cols / s.group;
    const uint16_t* in = static_cast<const uint16_t*>(p.qs[m][e]) + size_t(n) * groups;
    uint16_t* out = s.scales(e, m) + n;
    for (int kg = 0; kg < groups; ++kg) out[size_t(kg) * rows] = in[kg];
}

MixedPrepParams mixed_prep_params(const MoeExpertTable& x, const int* expert_off) {
    QS_CHECK_MSG(moe_int4_mixed_supported(x), "launch_moe_int4_mixed_prep: experts the mixed-input GEMMs do not cover");
    MixedPrepParams p{};
    p.qs[0] = x.gate_qs, p.qs[1] = x.up_qs, p.qs[2] = x.down_qs;
    p.expert_off = expert_off;
    p.out = int4_mixed_operands(x);
    return p;
}

// Blocks along x: one thread per row of the matrix with the most rows.
inline unsigned mixed_prep_blocks_x(const MoeExpertTable& x) {
    const int most = std::max(x.H, std::max(x.I, x.I_shared));
    return unsigned((most + kMixedPrepThreads - 1) / kMixedPrepThreads);
}

}  // namespace moe

Int4MixedOperands int4_mixed_operands(const MoeExpertTable& x) {
    Int4MixedOperands s;
    s.codes[0] = x.gate_q, s.codes[1] = x.up_q, s.codes[2] = x.down_q;
    s.scratch = static_cast<unsigned char*>(x.int4_scratch);
    s.E = x.E, s.H = x.H, s.I = x.I, s.I_shared = x.I_shared, s.group = x.int4_group;
    return s;
}

bool moe_int4_mixed_covers(int64_t H, int64_t I, int64_t I_shared, int64_t group) {
    const int64_t g = group;
    return moe::cutlass_grouped_gemm_compiled() && I > 0 && I_shared > 0 && g > 0 && g % 64 == 0 && H % 128 == 0 &&
           I % 128 == 0 && I_shared % 128 == 0 && H % g == 0 && I % g == 0 && I_shared % g == 0;
}

size_t moe_int4_mixed_scratch_bytes(int64_t E, int64_t H, int64_t I, int64_t I_shared, int64_t group) {
    Int4MixedOperands s;  // one formula for the scales' layout and its size
    s.E = int(E), s.H = int(H), s.I = int(I), s.I_shared = int(I_shared), s.group = int(group);
    return s.bytes();
}

bool moe_int4_mixed_supported(const MoeExpertTable& x) {
    return x.bf16_in_scratch && x.int4_scratch && !x.nvfp4 && x.gate_q && x.up_q && x.down_q && x.gate_qs && x.up_qs &&
           x.down_qs && x.E >= 1 && moe_int4_mixed_covers(x.H, x.I, x.I_shared, x.int4_group) &&
           x.int4_scratch_bytes >= moe_int4_mixed_scratch_bytes(x.E, x.H, x.I, x.I_shared, x.int4_group);
}

#if !defined(QS_MOE_EMULATE)
void launch_moe_int4_mixed_prep(const MoeExpertTable& x, const int* expert_off, cudaStream_t stream) {
    const moe::MixedPrepParams p = moe::mixed_prep_params(x, expert_off);
    const dim3 grid(moe::mixed_prep_blocks_x(x), unsigned(3 * (x.E + 1)));
    moe::moe_int4_mixed_prep_kernel<<<grid, moe::kMixedPrepThreads, 0, stream>>>(p);
    QS_CUDA_CHECK(cudaGetLastError());
}
#endif

}  // namespace qs::cuda

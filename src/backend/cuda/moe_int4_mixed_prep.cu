// The mixed-input GEMMs' operands of one layer's INT4 experts (moe_int4_mixed.h): signed codes and
// MN-major scales in the layer scratch. Bandwidth-bound (0.25 B read and written per weight, plus
// the scales): grid (blocks over the largest matrix, 3·(E + 1)), blockIdx.y = expert·3 + matrix;
// each thread XORs 4 16-byte vectors of 4 code words (consecutive threads on consecutive vectors)
// and moves up to 4 scales (consecutive threads on consecutive outputs: coalesced stores, the
// loads strided by the row's group count, which is small: 16 or 4 for the real model), all loads
// before any store. (One vector a thread ran at 1.1 TB/s on an H100: 764 µs for the real layer.)
// Compiles as host C++ too (QS_MOE_EMULATE: bench/kernels/moe_int4_mixed_prep_emu.cpp).
#include "backend/cuda/moe_int4_mixed.h"

#include "backend/cuda/moe_cutlass.h"
#include "core/check.h"
#if !defined(QS_MOE_EMULATE)
#include "backend/cuda/cuda_check.h"
#endif

namespace qs::cuda {
namespace moe {

constexpr int kMixedPrepThreads = 256;
constexpr int kMixedPrepVectors = 4;  // 16-byte code vectors (and scales) per thread

struct MixedPrepParams {
    const uint32_t* const* q[3];   // gate, up, down codes [E + 1] (u = q + 8)
    const uint16_t* const* qs[3];  // their bf16 scales [rows, cols/group]
    const int* expert_off;         // optional [E + 2]
    Int4MixedScratch out;
};

__global__ void __launch_bounds__(kMixedPrepThreads) moe_int4_mixed_prep_kernel(MixedPrepParams p) {
    const int e = int(blockIdx.y) / 3, m = int(blockIdx.y) % 3;
    if (p.expert_off != nullptr && p.expert_off[e + 1] == p.expert_off[e]) return;  // no rows: not read
    const Int4MixedScratch& s = p.out;
    const int rows = m == 2 ? s.H : int(s.ie(e));
    const int cols = m == 2 ? int(s.ie(e)) : s.H;
    const uint4* in = reinterpret_cast<const uint4*>(p.q[m][e]);
    uint4* out = reinterpret_cast<uint4*>(s.codes(e, m));
    const uint32_t vectors = uint32_t(rows) * uint32_t(cols) / 32;  // 4 words of 8 codes
    // kMixedPrepVectors vectors a thread, a block's threads on consecutive vectors in each step
    // (coalesced), every load issued before the first store.
    const uint32_t base = blockIdx.x * uint32_t(kMixedPrepThreads * kMixedPrepVectors) + threadIdx.x;
    uint4 w[kMixedPrepVectors];
#pragma unroll
    for (int j = 0; j < kMixedPrepVectors; ++j) {
        const uint32_t i = base + uint32_t(j * kMixedPrepThreads);
        w[j] = i < vectors ? in[i] : uint4{0, 0, 0, 0};
    }
    const uint32_t groups = uint32_t(cols / s.group), scales = uint32_t(rows) * groups;
    const uint16_t* qs = p.qs[m][e];
    uint16_t* so = s.scales(e, m);
    uint16_t sv[kMixedPrepVectors];
#pragma unroll
    for (int j = 0; j < kMixedPrepVectors; ++j) {  // output i = kg·rows + n takes the packed [n][kg]
        const uint32_t i = base + uint32_t(j * kMixedPrepThreads);
        const uint32_t kg = i / uint32_t(rows), n = i - kg * uint32_t(rows);
        sv[j] = i < scales ? qs[n * groups + kg] : uint16_t(0);
    }
#pragma unroll
    for (int j = 0; j < kMixedPrepVectors; ++j) {
        const uint32_t i = base + uint32_t(j * kMixedPrepThreads);
        if (i < vectors) out[i] = uint4{w[j].x ^ 0x88888888u, w[j].y ^ 0x88888888u, w[j].z ^ 0x88888888u, w[j].w ^ 0x88888888u};
        if (i < scales) so[i] = sv[j];
    }
}

MixedPrepParams mixed_prep_params(const MoeExpertTable& x, const int* expert_off) {
    QS_CHECK_MSG(moe_int4_mixed_supported(x), "launch_moe_int4_mixed_prep: experts the mixed-input GEMMs do not cover");
    MixedPrepParams p{};
    p.q[0] = x.gate_q, p.q[1] = x.up_q, p.q[2] = x.down_q;
    p.qs[0] = x.gate_qs, p.qs[1] = x.up_qs, p.qs[2] = x.down_qs;
    p.expert_off = expert_off;
    p.out = int4_mixed_scratch(x);
    return p;
}

// Blocks along x: kMixedPrepVectors vectors (4 words each) per thread over the largest matrix
// (it also has the most scales: a group of 64 or more has fewer scales than vectors).
inline unsigned mixed_prep_blocks_x(const MoeExpertTable& x) {
    const int64_t most = int64_t(x.H) * (x.I > x.I_shared ? x.I : x.I_shared) / 32;
    const int64_t per_block = int64_t(kMixedPrepThreads) * kMixedPrepVectors;
    return unsigned((most + per_block - 1) / per_block);
}

}  // namespace moe

Int4MixedScratch int4_mixed_scratch(const MoeExpertTable& x) {
    Int4MixedScratch s;
    s.base = static_cast<unsigned char*>(x.int4_scratch);
    s.E = x.E, s.H = x.H, s.I = x.I, s.I_shared = x.I_shared, s.group = x.int4_group;
    return s;
}

bool moe_int4_mixed_supported(const MoeExpertTable& x) {
    const int g = x.int4_group;
    return moe::cutlass_grouped_gemm_compiled() && x.bf16_in_scratch && x.int4_scratch && !x.nvfp4 && x.gate_q &&
           x.up_q && x.down_q && x.gate_qs && x.up_qs && x.down_qs && x.E >= 1 && x.I > 0 && x.I_shared > 0 && g > 0 &&
           g % 64 == 0 && x.H % 128 == 0 && x.I % 128 == 0 && x.I_shared % 128 == 0 && x.H % g == 0 && x.I % g == 0 &&
           x.I_shared % g == 0;
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

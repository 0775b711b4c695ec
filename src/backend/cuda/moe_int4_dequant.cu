// INT4 experts → one layer's BF16 scratch (see moe_int4_dequant.h). Bandwidth-bound: per weight
// 0.5 B of codes (+ 2 B of scale per INT4 group, 1 B per NVFP4 block of 16) read and 2 B written; the real model's layer is
// 257 experts × 3 × 512 × 2048 weights, 1.6 GB written, ~0.4 ms at 4.25 TB/s.
// Grid (blocks over the largest matrix, 3·(E + 1)): blockIdx.y = expert·3 + matrix (gate, up,
// down); each thread turns 4 code words (8 codes each; word c of the matrix is row c / (cols/8))
// into 4 × 8 bf16 (one 16-byte store each), loads before stores, consecutive threads on
// consecutive words (coalesced 4-byte loads, 16-byte stores). w = q · scale in fp32 (exact: int4_layout.h),
// rounded to bf16 to nearest even: the host's f32_to_bf16 of LinearWeight::row_to_f32.
// NVFP4 experts (MoeExpertTable::nvfp4, group 16): w = e2m1 · (scale · global) in fp32, the order
// of LinearWeight::row_to_f32 for a multiplied global (ModelOpt's weight_scale_2): bitwise its
// value there (code 8 is −0 here, +0 there: the same value); a divided global (compressed-tensors)
// is applied as its reciprocal (nvfp4_layout.h), one fp32 rounding more before the bf16 one.
// Version 2 (launch_moe_int4_dequant's version, the default since session 42's H100 run: 1,251 µs for
// the real layer against 1,580, its scratch bitwise version 1's): the same values, with 32-bit index
// arithmetic (version 1 divides 64-bit word indices twice per word, ~100 instructions each, about
// the time the memory takes at this size), 8 words per thread, and the scale loads issued with the
// code loads before any use.
// Compiles as host C++ too (QS_MOE_EMULATE: the CPU emulation bench/kernels/moe_int4_dequant_emu.cpp).
#include "backend/cuda/moe_int4_dequant.h"

#include <algorithm>
#include <cstring>
#include <string>

#include <cuda_bf16.h>

#include "backend/cuda/int4_unpack.cuh"
#include "core/check.h"
#if !defined(QS_MOE_EMULATE)
#include "backend/cuda/cuda_check.h"
#endif

namespace qs::cuda {
namespace moe {

constexpr int kDequantThreads = 256;
constexpr int kDequantWords = 4;  // u32 code words (8 weights each) per thread

struct DequantParams {
    const uint32_t* const* q[3];   // gate, up, down codes [E + 1]
    const void* const* qs[3];      // their scales (MoeExpertTable::gate_qs)
    const void* const* w[3];       // the scratch's bf16 matrices [E + 1]
    const int* expert_off;         // optional [E + 2]
    const float* global;           // NVFP4: the matrices' globals [3 (E + 1)]; null: INT4
    int E, H, I, I_shared, group;
};

__device__ __forceinline__ uint32_t bf16x2_rn(float lo, float hi) {
    const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    uint32_t u;
    memcpy(&u, &v, 4);
    return u;
}

// The matrix block row blockIdx.y dequantises: expert e = y / 3, matrix m = y % 3 (gate, up, down).
struct DequantMatrix {
    int rows, cols;
    const uint32_t* codes;   // [rows, cols/8]
    const void* scales;      // INT4: bf16 [rows, cols/group]; NVFP4: E4M3 bytes [rows, cols/16]
    uint4* out;              // bf16 [rows, cols], 8 per uint4
    float global;            // NVFP4's global multiplier (1 for INT4)
};

// False when the block has nothing to do (an expert without routed rows: its scratch rows are not read).
template <w4::Code4 F>
__device__ __forceinline__ bool dequant_matrix(const DequantParams& p, DequantMatrix& d) {
    const int e = int(blockIdx.y) / 3, m = int(blockIdx.y) % 3;
    if (p.expert_off != nullptr && p.expert_off[e + 1] == p.expert_off[e]) return false;
    const int Ie = e == p.E ? p.I_shared : p.I;
    d.rows = m == 2 ? p.H : Ie;
    d.cols = m == 2 ? Ie : p.H;
    d.codes = p.q[m][e];
    d.scales = p.qs[m][e];
    d.out = reinterpret_cast<uint4*>(const_cast<void*>(p.w[m][e]));
    d.global = F == w4::Code4::kNvfp4 ? p.global[3 * e + m] : 1.0f;
    return true;
}

// One code word's 8 weights, code · scale (NVFP4: code · (scale · global)) in fp32, as 8 bf16 (round to
// nearest even).
template <w4::Code4 F>
__device__ __forceinline__ uint4 dequant_word(uint32_t w, w4::scale_t<F> scale, float global) {
    float s = w4::scale_f32<F>(scale);
    if constexpr (F == w4::Code4::kNvfp4) s *= global;
    float f[8];
    w4::unpack8<F>(w, f);
    uint4 o;
    o.x = bf16x2_rn(f[0] * s, f[1] * s);
    o.y = bf16x2_rn(f[2] * s, f[3] * s);
    o.z = bf16x2_rn(f[4] * s, f[5] * s);
    o.w = bf16x2_rn(f[6] * s, f[7] * s);
    return o;
}

template <w4::Code4 F>
__global__ void __launch_bounds__(kDequantThreads) moe_int4_dequant_kernel(DequantParams p) {
    DequantMatrix d;
    if (!dequant_matrix<F>(p, d)) return;
    const int words_per_row = d.cols / 8, groups_per_row = d.cols / p.group;
    const int64_t words = int64_t(d.rows) * words_per_row;
    // kDequantWords words per thread, a block's threads on consecutive words in each step: a warp
    // loads 128 contiguous bytes of codes and stores 512 contiguous bytes of bf16.
    const int64_t base = int64_t(blockIdx.x) * kDequantThreads * kDequantWords + threadIdx.x;
    uint32_t w[kDequantWords];
#pragma unroll
    for (int i = 0; i < kDequantWords; ++i) {  // every load first, then the stores
        const int64_t c = base + int64_t(i) * kDequantThreads;
        w[i] = c < words ? d.codes[c] : 0u;
    }
#pragma unroll
    for (int i = 0; i < kDequantWords; ++i) {
        const int64_t c = base + int64_t(i) * kDequantThreads;
        if (c >= words) break;
        const int64_t row = c / words_per_row;
        // A word's 8 inputs lie in one group (group % 8 == 0).
        const auto* scales = static_cast<const w4::scale_t<F>*>(d.scales);
        d.out[c] = dequant_word<F>(w[i], scales[row * groups_per_row + int(c % words_per_row) * 8 / p.group], d.global);
    }
}

constexpr int kDequantWords2 = 8;  // version 2's code words per thread

template <w4::Code4 F>
__global__ void __launch_bounds__(kDequantThreads) moe_int4_dequant_v2_kernel(DequantParams p) {
    DequantMatrix d;
    if (!dequant_matrix<F>(p, d)) return;
    const uint32_t cols = uint32_t(d.cols);
    const uint32_t words_per_row = cols / 8, groups_per_row = cols / uint32_t(p.group),
                   words_per_group = uint32_t(p.group) / 8;
    const uint32_t words = uint32_t(d.rows) * words_per_row;  // < 2^31: dequant_params checks
    // A block's threads on consecutive words in each step (coalesced loads and stores, as version 1).
    const uint32_t base = blockIdx.x * uint32_t(kDequantThreads * kDequantWords2) + threadIdx.x;
    uint32_t w[kDequantWords2];
    const auto* scales = static_cast<const w4::scale_t<F>*>(d.scales);
    w4::scale_t<F> sb[kDequantWords2];
#pragma unroll
    for (int i = 0; i < kDequantWords2; ++i) {  // every load (codes and scales) first, then the stores
        const uint32_t c = base + uint32_t(i * kDequantThreads);
        const uint32_t row = c / words_per_row;
        const bool in = c < words;
        w[i] = in ? d.codes[c] : 0u;
        sb[i] = in ? scales[row * groups_per_row + (c - row * words_per_row) / words_per_group] : w4::scale_t<F>(0);
    }
#pragma unroll
    for (int i = 0; i < kDequantWords2; ++i) {
        const uint32_t c = base + uint32_t(i * kDequantThreads);
        if (c >= words) break;
        d.out[c] = dequant_word<F>(w[i], sb[i], d.global);
    }
}

DequantParams dequant_params(const MoeExpertTable& x, const int* expert_off) {
    const int g = x.int4_group;
    QS_CHECK_MSG(x.gate_q && x.up_q && x.down_q && x.gate_qs && x.up_qs && x.down_qs && x.gate && x.up && x.down,
                 "launch_moe_int4_dequant: INT4 experts and the scratch's BF16 tables are needed");
    QS_CHECK_MSG(x.E >= 1 && x.I > 0 && x.I_shared > 0 && g > 0 && g % 8 == 0 && x.H % g == 0 && x.I % g == 0 &&
                     x.I_shared % g == 0,
                     "launch_moe_int4_dequant: a group (multiple of 8) dividing H, I and I_shared");
    QS_CHECK_MSG(int64_t(x.H) * std::max(x.I, x.I_shared) / 8 < (int64_t(1) << 31),
                 "launch_moe_int4_dequant: an expert matrix of 2^31 code words or more");
    // The upload may size the scratch for the mixed-input GEMMs' scales only (DeviceWeights::
    // Int4ScratchPlan): BF16 values must then never be asked for.
    const size_t need = moe_int4_scratch_bytes(x.E, x.H, x.I, x.I_shared);
    QS_CHECK_MSG(x.int4_scratch_bytes >= need,
                 ("launch_moe_int4_dequant: the layer's BF16 values need " + std::to_string(need) +
                  " bytes of scratch, it holds " + std::to_string(x.int4_scratch_bytes) +
                  " (sized for the mixed-input GEMMs' scales: a path the upload's plan did not expect)")
                     .c_str());
    DequantParams p{};
    p.q[0] = x.gate_q, p.q[1] = x.up_q, p.q[2] = x.down_q;
    p.qs[0] = x.gate_qs, p.qs[1] = x.up_qs, p.qs[2] = x.down_qs;
    p.w[0] = x.gate, p.w[1] = x.up, p.w[2] = x.down;
    p.expert_off = expert_off;
    QS_CHECK_MSG(!x.nvfp4 || (g == 16 && x.nvfp4_global), "launch_moe_int4_dequant: NVFP4 experts need group 16 and their globals");
    p.global = x.nvfp4 ? x.nvfp4_global : nullptr;
    p.E = x.E, p.H = x.H, p.I = x.I, p.I_shared = x.I_shared, p.group = g;
    return p;
}

// Blocks along x: words_per_thread (kDequantWords, version 2's kDequantWords2) code words per
// thread over the largest matrix.
inline unsigned dequant_blocks_x(const MoeExpertTable& x, int words_per_thread = kDequantWords) {
    const int64_t most = int64_t(x.H) * std::max(x.I, x.I_shared) / 8;
    const int64_t per_block = int64_t(kDequantThreads) * words_per_thread;
    return unsigned((most + per_block - 1) / per_block);
}

}  // namespace moe

size_t moe_int4_scratch_bytes(int64_t E, int64_t H, int64_t I, int64_t I_shared) {
    return size_t(3 * H * (E * I + I_shared)) * 2;
}

void moe_int4_scratch_pointers(void* scratch, int64_t E, int64_t H, int64_t I, int64_t I_shared,
                               std::vector<const void*>& gate, std::vector<const void*>& up,
                               std::vector<const void*>& down) {
    gate.clear(), up.clear(), down.clear();
    auto* p = static_cast<unsigned char*>(scratch);
    for (int64_t e = 0; e <= E; ++e) {
        const size_t m = size_t((e == E ? I_shared : I) * H) * 2;  // one matrix's bytes
        gate.push_back(p), up.push_back(p + m), down.push_back(p + 2 * m);
        p += 3 * m;
    }
}

#if !defined(QS_MOE_EMULATE)
void launch_moe_int4_dequant(const MoeExpertTable& x, const int* expert_off, cudaStream_t stream, int version) {
    using w4::Code4;
    QS_CHECK_MSG(version == 1 || version == 2, "launch_moe_int4_dequant: version 1 or 2");
    const moe::DequantParams p = moe::dequant_params(x, expert_off);
    const unsigned gy = unsigned(3 * (x.E + 1)), t = moe::kDequantThreads;
    if (version == 1) {
        const dim3 grid(moe::dequant_blocks_x(x), gy);
        if (p.global) moe::moe_int4_dequant_kernel<Code4::kNvfp4><<<grid, t, 0, stream>>>(p);
        else moe::moe_int4_dequant_kernel<Code4::kInt4><<<grid, t, 0, stream>>>(p);
    } else {
        const dim3 grid(moe::dequant_blocks_x(x, moe::kDequantWords2), gy);
        if (p.global) moe::moe_int4_dequant_v2_kernel<Code4::kNvfp4><<<grid, t, 0, stream>>>(p);
        else moe::moe_int4_dequant_v2_kernel<Code4::kInt4><<<grid, t, 0, stream>>>(p);
    }
    QS_CUDA_CHECK(cudaGetLastError());
}
#endif

}  // namespace qs::cuda

// Pieces the FP8 small-rows kernels share (small_linear_fp8.cu: version 2; small_linear_fp8_mma.cu:
// version 3 on tensor cores): the parts table of a launch (and its host-side construction and
// overlap check) and step 1's quantisation of x, with launch_quant_fp8_rows128's exact operations.
// Device code; also compiled by the host emulator.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include <cuda_fp8.h>

#include "backend/cuda/small_linear_kernels.h"
#include "core/check.h"

namespace qs::cuda::small_fp8 {

// Two e4m3 codes → their values (exact in fp32).
__device__ __forceinline__ float2 fp8x2_to_float2(__nv_fp8x2_storage_t codes) {
    __nv_fp8x2_e4m3 v;
    v.__x = codes;
    return static_cast<float2>(v);
}

// The weights of one launch (one input x): output feature o of the launch is feature
// o - first_row[p] of part p, the last p with first_row[p] <= o. Each part's rows are padded to a
// multiple of row_align (make_fp8_parts; version 3 computes 16 at once): features o - first_row[p]
// >= out[p] are padding, neither read nor written.
struct Fp8Parts {
    const uint8_t* w[kSmallLinearFp8V2MaxParts];        // [out_p, in] e4m3
    const float* scale_inv[kSmallLinearFp8V2MaxParts];  // [ceil(out_p / 128), in / 128]
    float* y[kSmallLinearFp8V2MaxParts];                // [T, out_p]
    int out[kSmallLinearFp8V2MaxParts];                 // out_p
    int first_row[kSmallLinearFp8V2MaxParts + 1];  // Σ_{q<p} out_q rounded up to row_align; then the total
    int parts = 0, rows = 0;
};

// The table of 1..4 weights (host); `launcher` names the caller in errors.
inline Fp8Parts make_fp8_parts(std::span<const SmallLinearFp8Part> parts, const char* launcher, int row_align = 1) {
    QS_CHECK_MSG(!parts.empty() && parts.size() <= size_t(kSmallLinearFp8V2MaxParts),
                 (std::string(launcher) + ": 1 to 4 weights a launch").c_str());
    Fp8Parts a;
    a.parts = int(parts.size());
    int64_t rows = 0;
    for (size_t i = 0; i < parts.size(); ++i) {
        QS_CHECK_MSG(parts[i].out > 0 && parts[i].scale_inv && parts[i].y,
                     (std::string(launcher) + ": a weight without rows, scales or output").c_str());
        a.w[i] = static_cast<const uint8_t*>(parts[i].w);
        a.scale_inv[i] = parts[i].scale_inv;
        a.y[i] = parts[i].y;
        a.out[i] = int(parts[i].out);
        a.first_row[i] = int(rows);
        rows += (parts[i].out + row_align - 1) / row_align * row_align;
    }
    QS_CHECK_MSG(rows < (int64_t(1) << 30), (std::string(launcher) + ": too many output features").c_str());
    for (size_t i = parts.size(); i < size_t(kSmallLinearFp8V2MaxParts); ++i) a.out[i] = 0;
    for (size_t i = parts.size(); i <= size_t(kSmallLinearFp8V2MaxParts); ++i) a.first_row[i] = int(rows);
    a.rows = int(rows);
    return a;
}

// Whether the n floats at p and the m floats at q do not overlap (a null pointer overlaps nothing).
inline bool disjoint(const float* p, int64_t n, const float* q, int64_t m) {
    return p == nullptr || q == nullptr || p + n <= q || q + m <= p;
}

// Output feature o of the launch: its part's pointers and its row there. Selects over the
// unrolled parts (a dynamic index into the kernel's parameters would copy them to local memory).
struct PartRow {
    const uint8_t* w;
    const float* scale_inv;
    float* y;
    int o, out;  // the row in the part (>= out: padding), the part's rows
};

__device__ __forceinline__ PartRow part_row(const Fp8Parts& a, int o) {
    PartRow r{a.w[0], a.scale_inv[0], a.y[0], o, a.out[0]};
#pragma unroll
    for (int i = 1; i < kSmallLinearFp8V2MaxParts; ++i) {
        if (i < a.parts && o >= a.first_row[i]) r = {a.w[i], a.scale_inv[i], a.y[i], o - a.first_row[i], a.out[i]};
    }
    return r;
}

// e4m3 code of v / scale (v / scale correctly rounded, RNE, satfinite) as its fp32 value: step 1's
// conversion, by pairs there.
__device__ __forceinline__ float2 quantise_pair(float a, float b, float scale) {
    return fp8x2_to_float2(__nv_cvt_float2_to_fp8x2(make_float2(__fdiv_rn(a, scale), __fdiv_rn(b, scale)),
                                                    __NV_SATFINITE, __NV_E4M3));
}

// Step 1 for 16 values of one 128-column group of x: lane sub (0..7) of the group's 8 consecutive,
// 8-aligned lanes reads x16 = the group's values 16 sub .. 16 sub + 15 (16-byte aligned) and gets
// their e4m3 codes as fp32 values in q; returns the group's scale (amax / 448, or 1 for a zero
// group), as launch_quant_fp8_rows128 computes them.
__device__ __forceinline__ float quantise_16(const float* x16, float (&q)[16]) {
    const float4* xp = reinterpret_cast<const float4*>(x16);
    float v[16];
#pragma unroll
    for (int j = 0; j < 4; ++j) {
        const float4 f = __ldg(xp + j);
        v[4 * j] = f.x, v[4 * j + 1] = f.y, v[4 * j + 2] = f.z, v[4 * j + 3] = f.w;
    }
    float amax = 0.0f;
#pragma unroll
    for (int j = 0; j < 16; ++j) amax = fmaxf(amax, fabsf(v[j]));
    // The 8 lanes of a group are consecutive and aligned: xor offsets below 8 stay inside it.
#pragma unroll
    for (int off = 1; off < 8; off <<= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, off));
    const float scale = amax > 0.0f ? __fdiv_rn(amax, 448.0f) : 1.0f;
#pragma unroll
    for (int j = 0; j < 8; ++j) {
        const float2 f = quantise_pair(v[2 * j], v[2 * j + 1], scale);
        q[2 * j] = f.x, q[2 * j + 1] = f.y;
    }
    return scale;
}

}  // namespace qs::cuda::small_fp8

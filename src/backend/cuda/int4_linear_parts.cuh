// The table of weights a 4-bit small-rows launch takes (int4_linear_kernels.cu: fp32 FMAs;
// int4_linear_mma.cu: tensor cores): the host builder with its checks, the output norm's checks, and
// the device lookup of a row's weight. Included by those .cu files (and, through them, the CPU emulation).
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "backend/cuda/int4_linear_kernels.h"
#include "core/check.h"

namespace qs::cuda::int4_parts {

// Row o of the launch is row o - first_row[p] of weight p, the last p with first_row[p] <= o; each
// weight's rows are padded to a multiple of the builder's row_align (rows past a weight's out are
// padding, neither read nor written).
struct Int4Parts {
    const uint32_t* codes[kInt4LinearMaxParts];
    const void* scales[kInt4LinearMaxParts];  // Int4LinearPart::scales
    float* y[kInt4LinearMaxParts];
    float global[kInt4LinearMaxParts];  // NVFP4's multipliers (1 for INT4)
    int out[kInt4LinearMaxParts];
    int first_row[kInt4LinearMaxParts + 1];
    int parts = 0, rows = 0;
};

// The table of 1..kInt4LinearMaxParts weights (host); `launcher` names the caller in errors.
inline Int4Parts make_parts(std::span<const Int4LinearPart> parts, bool nvfp4, int row_align, const char* launcher) {
    const std::string who(launcher);
    QS_CHECK_MSG(!parts.empty() && parts.size() <= size_t(kInt4LinearMaxParts), (who + ": 1 to 4 weights a launch").c_str());
    Int4Parts a;
    a.parts = int(parts.size());
    int64_t rows = 0;
    for (size_t i = 0; i < size_t(kInt4LinearMaxParts); ++i) {
        const bool used = i < parts.size();
        if (used)
            QS_CHECK_MSG(parts[i].out > 0 && parts[i].scales != nullptr && parts[i].y != nullptr,
                         (who + ": a weight without rows, scales or output").c_str());
        a.codes[i] = used ? parts[i].codes : nullptr;
        a.scales[i] = used ? parts[i].scales : nullptr;
        a.y[i] = used ? parts[i].y : nullptr;
        a.global[i] = used && nvfp4 ? parts[i].global : 1.0f;
        a.out[i] = used ? int(parts[i].out) : 0;
        a.first_row[i] = int(rows);
        if (used) rows += (parts[i].out + row_align - 1) / row_align * row_align;
    }
    QS_CHECK_MSG(rows < (int64_t(1) << 30), (who + ": too many output features").c_str());
    a.first_row[kInt4LinearMaxParts] = int(rows);
    a.rows = int(rows);
    return a;
}

// The output norm (SmallLinearOutputNorm) rides on one weight of 2,048 or 4,096 rows.
inline void check_output_norm(std::span<const Int4LinearPart> parts, int64_t T, const SmallLinearOutputNorm* post,
                              const char* launcher) {
    if (post == nullptr) return;
    QS_CHECK_MSG(parts.size() == 1 && int4_linear_output_norm_supports(T, parts[0].out),
                 (std::string(launcher) + ": the output norm takes one weight of 2,048 or 4,096 rows").c_str());
    QS_CHECK(post->x != nullptr && post->w != nullptr && post->h != nullptr && post->counter != nullptr);
}

// Row o of the launch (o < rows): its weight's codes, scales, output and multiplier, and its row there.
struct PartRow {
    const uint32_t* codes;
    const void* scales;
    float* y;
    float global;
    int o, out;  // the row in its weight, the weight's rows
};
// Selects over the unrolled parts (a dynamic index into the kernel's parameters would copy them to
// local memory).
__device__ __forceinline__ PartRow part_row(const Int4Parts& a, int o) {
    PartRow r{a.codes[0], a.scales[0], a.y[0], a.global[0], o, a.out[0]};
#pragma unroll
    for (int i = 1; i < kInt4LinearMaxParts; ++i)
        if (i < a.parts && o >= a.first_row[i]) r = {a.codes[i], a.scales[i], a.y[i], a.global[i], o - a.first_row[i], a.out[i]};
    return r;
}

}  // namespace qs::cuda::int4_parts

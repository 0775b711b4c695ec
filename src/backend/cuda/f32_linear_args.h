// The launch arguments of the fp32 linear kernels (small_linear_f32.cu, f32_linear_tiles.cu): up to
// kSmallLinearF32MaxParts weights of one input, their output features concatenated.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "backend/cuda/small_linear_kernels.h"
#include "core/check.h"

namespace qs::cuda {

struct F32LinearArgs {
    const float* w[kSmallLinearF32MaxParts];     // [out_p, in]
    float* y[kSmallLinearF32MaxParts];           // [T, out_p]
    int first_row[kSmallLinearF32MaxParts + 1];  // first_row[p] = Σ_{q<p} out_q; [parts] = all features
    int parts = 0, in = 0, T = 0;
    const float* x = nullptr;  // [T, in]
};

// The arguments of one launch; every part must pass supports(T, in, w, x) and the features number
// below max_features. `who` names the launcher in the error messages.
template <class Supports>
F32LinearArgs make_f32_linear_args(std::span<const SmallLinearF32Part> parts, int64_t in, const float* x, int64_t T,
                                   Supports supports, int64_t max_features, const char* who) {
    QS_CHECK_MSG(!parts.empty() && parts.size() <= size_t(kSmallLinearF32MaxParts),
                 (std::string(who) + ": 1 to 4 weights a launch").c_str());
    F32LinearArgs a;
    a.parts = int(parts.size());
    a.in = int(in);
    a.T = int(T);
    a.x = x;
    int64_t rows = 0;
    for (size_t i = 0; i < parts.size(); ++i) {
        QS_CHECK_MSG(supports(T, in, parts[i].w, x) && parts[i].out > 0,
                     (std::string(who) + ": unsupported call (T, in, alignment)").c_str());
        a.w[i] = parts[i].w;
        a.y[i] = parts[i].y;
        a.first_row[i] = int(rows);
        rows += parts[i].out;
    }
    QS_CHECK_MSG(rows < max_features, (std::string(who) + ": too many output features").c_str());
    a.first_row[parts.size()] = int(rows);
    return a;
}

}  // namespace qs::cuda

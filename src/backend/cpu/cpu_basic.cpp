// CPU ops: buffers, embedding, zero-centred RMSNorm, dense linear, residual add.
#include <cmath>
#include <algorithm>
#include <cstring>

#include "backend/cpu/cpu_ops.h"
#include "core/check.h"

namespace qs {

float* CpuOps::persistent(int id, int64_t n) {
    std::vector<float>& b = persistent_[id];
    if (int64_t(b.size()) < n) b.assign(size_t(n), 0.0f);
    return b.data();
}


float* CpuOps::alloc(int64_t n) {
    buffers_.push_back(std::make_unique<float[]>(size_t(n)));  // value-initialised: zeros
    return buffers_.back().get();
}

void CpuOps::embed(const WeightBuffer& table, const int32_t* ids, int64_t T, float* x) {
    const int64_t vocab = table.shape[0], H = table.shape[1];
    for (int64_t t = 0; t < T; ++t) {
        QS_CHECK(ids[t] >= 0 && ids[t] < vocab);
        for (int64_t i = 0; i < H; ++i) x[t * H + i] = load_as_f32(table.data, table.dtype, size_t(ids[t] * H + i));
    }
}

namespace cpu {

float dot(const float* a, const float* b, int64_t n) {
    float acc = 0.0f;
#pragma omp simd reduction(+ : acc)
    for (int64_t i = 0; i < n; ++i) acc += a[i] * b[i];
    return acc;
}

void linear(const float* x, int64_t T, const LinearWeight& w, float* y) {
    const int64_t in = w.in_features, out = w.out_features;
    const bool parallel = out * in * std::max<int64_t>(T, 4) >= kParallelWork;
#pragma omp parallel if (parallel)
    {
        std::vector<float> row(static_cast<size_t>(in));
#pragma omp for schedule(static)
        for (int64_t o = 0; o < out; ++o) {
            w.row_to_f32(o, row.data());
            for (int64_t t = 0; t < T; ++t) y[t * out + o] = dot(x + t * in, row.data(), in);
        }
    }
}

void rms_norm_zc_row(float* x, const float* w, int64_t n, double eps) {
    float ss = 0.0f;
    for (int64_t i = 0; i < n; ++i) ss += x[i] * x[i];
    const float inv = 1.0f / std::sqrt(ss / float(n) + float(eps));
    for (int64_t i = 0; i < n; ++i) x[i] = x[i] * inv * (1.0f + w[i]);
}

float round_for_kv(float x, KvCacheDtype t) {
    switch (t) {
        case KvCacheDtype::kF32: return x;
        case KvCacheDtype::kBF16: return round_to_bf16(x);
        case KvCacheDtype::kFP8E4M3: return fp8e4m3_to_f32(f32_to_fp8e4m3(x));
    }
    return x;
}

}  // namespace cpu

void CpuOps::rms_norm_zc(const float* x, const ParamVector& w, int64_t T, int64_t n, double eps, float* y) {
    for (int64_t t = 0; t < T; ++t) {
        if (y != x) std::memcpy(y + t * n, x + t * n, size_t(n) * sizeof(float));
        cpu::rms_norm_zc_row(y + t * n, w.data(), n, eps);
    }
}

void CpuOps::linear(const float* x, int64_t T, const LinearWeight& w, float* y) { cpu::linear(x, T, w, y); }

void CpuOps::add(float* x, const float* y, int64_t n) {
    for (int64_t i = 0; i < n; ++i) x[i] += y[i];
}

void CpuOps::fill_zero(float* x, int64_t n) { std::fill(x, x + n, 0.0f); }

void CpuOps::gather_rows(const float* src, const int32_t* rows, int64_t R, int64_t n, float* out) {
    for (int64_t r = 0; r < R; ++r) std::memcpy(out + r * n, src + int64_t(rows[r]) * n, size_t(n) * sizeof(float));
}

void CpuOps::concat_columns(const float* a, const float* b, int64_t T, int64_t n, float* out) {
    for (int64_t t = 0; t < T; ++t) {
        std::memcpy(out + t * 2 * n, a + t * n, size_t(n) * sizeof(float));
        std::memcpy(out + t * 2 * n + n, b + t * n, size_t(n) * sizeof(float));
    }
}

}  // namespace qs

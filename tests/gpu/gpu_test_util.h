// Helpers of the GPU tests (label `gpu`): skip where no CUDA device is visible, random inputs,
// device round trips, normalised error ‖a − b‖ / ‖b‖ (NaN counts as failure).
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_ops.h"
#include "config/model_config.h"
#include "core/dtype.h"

#define QS_REQUIRE_GPU()                                                               \
    do {                                                                               \
        if (!qs::cuda::cuda_device_available()) GTEST_SKIP() << "no CUDA device visible"; \
    } while (0)

namespace qs::gpu_test {

inline std::string source_path(const std::string& rel) {
    // The GPU machine runs binaries built elsewhere: QS_SOURCE_DIR in the environment wins.
    const char* env = std::getenv("QS_SOURCE_DIR");
    return std::string(env ? env : QS_SOURCE_DIR) + "/" + rel;
}

// Test-only: QS_TEST_MOE_ROUTER_KERNEL (0, 1 or 2; unset = the option's default) sets
// CudaOptions::moe_router_kernel for the MoE parity tests and (through apply_test_env) the model
// tests, so that they run with their unchanged bounds on either router (2: the kernel at every
// size, which the default's 8,192-row threshold never gives them). QS_TEST_MOE_ROUTER_CHECK=1 also sets CudaOptions::moe_router_check (each eager
// kernel call compared with cuBLAS; suspicious rows logged), QS_TEST_GRAPH_MAX_BATCH=N
// CudaOptions::graph_max_batch (0: every call eager, so every call is compared).
// QS_TEST_MOE_DECODE_EOUT_BF16 (0 or 1; unset = the option's default) sets
// CudaOptions::moe_decode_eout_bf16, so that the model-level tests can run, with their bounds
// unchanged, on bf16 expert outputs (session 37: two engine-equality tests fail with 1).
inline cuda::CudaOptions& apply_test_router_env(cuda::CudaOptions& o) {
    if (const char* e = std::getenv("QS_TEST_MOE_DECODE_EOUT_BF16"); e != nullptr && *e != 0) {
        const std::string s(e);
        if (s != "0" && s != "1")
            throw std::invalid_argument("QS_TEST_MOE_DECODE_EOUT_BF16 must be 0 or 1 (got '" + s + "')");
        o.moe_decode_eout_bf16 = std::stoi(s);
    }
    const char* c = std::getenv("QS_TEST_MOE_ROUTER_CHECK");
    if (c != nullptr && std::string(c) == "1") o.moe_router_check = true;
    const char* g = std::getenv("QS_TEST_GRAPH_MAX_BATCH");
    if (g != nullptr && *g != 0) o.graph_max_batch = std::stoll(g);
    const char* r = std::getenv("QS_TEST_MOE_ROUTER_KERNEL");
    if (r == nullptr || *r == 0) return o;
    const std::string s(r);
    if (s != "0" && s != "1" && s != "2")
        throw std::invalid_argument("QS_TEST_MOE_ROUTER_KERNEL must be 0, 1 or 2 (got '" + s + "')");
    o.moe_router_kernel = std::stoi(s);
    return o;
}

// Test-only selection of CudaOptions::gdn_prefill_version, read here and nowhere else: the
// environment variable QS_TEST_GDN_PREFILL_VERSION (1 to 6; unset = the option's default, 0 =
// auto: 4 with bf16 state, 1 with fp32) applies
// to the tests that build their options through this (CudaModel's test_options(),
// CudaOpsParity.GatedDeltaNetWithStateSlots), so that `scripts/gpu_run.sh gdn_acc` can run those
// tests, with their unchanged bounds, on prefill version 2 before its default flips.
// Likewise QS_TEST_ATTENTION_DECODE_VERSION (1 or 2; unset = the option's default) selects
// CudaOptions::attention_decode_version for those tests (the decode attention kernel's version 2),
// and QS_TEST_SHARED_LINEAR_INPUT (0 or 1; unset = the default) sets
// CudaOptions::shared_linear_input, so the model-level tests can run on either setting of those
// two options (both default to the new path since session 17's H200 run). QS_TEST_GDN_DECODE_KERNEL
// (-1, 0, 1 or 2; unset = the default) sets CudaOptions::gdn_decode_kernel (2: the warp-slice
// kernel for one-token rows).
inline cuda::CudaOptions& apply_test_env(cuda::CudaOptions& o) {
    if (const char* a = std::getenv("QS_TEST_ATTENTION_DECODE_VERSION"); a != nullptr && *a != 0) {
        const std::string s(a);
        if (s != "1" && s != "2")
            throw std::invalid_argument("QS_TEST_ATTENTION_DECODE_VERSION must be 1 or 2 (got '" + s + "')");
        o.attention_decode_version = std::stoi(s);
    }
    if (const char* v = std::getenv("QS_TEST_SHARED_LINEAR_INPUT"); v != nullptr && *v != 0) {
        const std::string s(v);
        if (s != "0" && s != "1")
            throw std::invalid_argument("QS_TEST_SHARED_LINEAR_INPUT must be 0 or 1 (got '" + s + "')");
        o.shared_linear_input = std::stoi(s);
    }
    apply_test_router_env(o);
    if (const char* k = std::getenv("QS_TEST_GDN_DECODE_KERNEL"); k != nullptr && *k != 0) {
        const std::string s(k);
        if (s != "-1" && s != "0" && s != "1" && s != "2")
            throw std::invalid_argument("QS_TEST_GDN_DECODE_KERNEL must be -1, 0, 1 or 2 (got '" + s + "')");
        o.gdn_decode_kernel = std::stoi(s);
    }
    const char* v = std::getenv("QS_TEST_GDN_PREFILL_VERSION");
    if (v == nullptr || *v == 0) return o;
    const std::string s(v);
    if (s != "1" && s != "2" && s != "3" && s != "4" && s != "5" && s != "6")
        throw std::invalid_argument("QS_TEST_GDN_PREFILL_VERSION must be 1 to 6 (got '" + s + "')");
    o.gdn_prefill_version = std::stoi(s);
    return o;
}

// The real model's layer shapes in a 4-layer model with num_experts experts (the op-level tests'
// "real" case: the expert count only sizes the tables; every other dimension is the 35B-A3B's).
inline ModelConfig real_shapes(int64_t num_experts = 32) {
    ModelConfig c = qwen36_35b_a3b_config();
    c.num_hidden_layers = 4;
    c.layer_types.resize(4);
    c.num_experts = num_experts;
    return c;
}

inline std::vector<float> random_floats(size_t n, std::mt19937& rng, float scale = 1.0f) {
    std::normal_distribution<float> d(0.0f, scale);
    std::vector<float> v(n);
    for (float& x : v) x = d(rng);
    return v;
}

inline double normalised_error(const std::vector<float>& got, const std::vector<float>& ref) {
    if (got.size() != ref.size()) return INFINITY;
    double num = 0, den = 0;
    for (size_t i = 0; i < got.size(); ++i) {
        const double d = double(got[i]) - double(ref[i]);
        if (!std::isfinite(got[i])) return INFINITY;
        num += d * d;
        den += double(ref[i]) * double(ref[i]);
    }
    return std::sqrt(num / std::max(den, 1e-30));
}

// A device copy of host floats, in the backend's arena.
inline float* to_device(cuda::CudaOps& ops, const std::vector<float>& h) {
    float* d = ops.alloc(int64_t(h.size()));
    ops.copy_from_host(h.data(), int64_t(h.size()), d);
    return d;
}

inline std::vector<float> to_host(cuda::CudaOps& ops, const float* d, size_t n) {
    std::vector<float> h(n);
    ops.copy_to_host(d, int64_t(n), h.data());
    return h;
}

// One MoE call on `ops` (x copied in, y copied back, the arena freed after): y [T, H].
inline std::vector<float> moe_y(cuda::CudaOps& ops, const std::vector<float>& x, int64_t T, const MoeWeights& m,
                                int64_t k, bool norm_topk_prob) {
    const int64_t n = int64_t(x.size());
    float* dy = ops.alloc(n);
    ops.moe(to_device(ops, x), T, m, k, norm_topk_prob, dy);
    std::vector<float> y = to_host(ops, dy, size_t(n));
    ops.free_all();
    return y;
}

// Reads n raw elements of a device cache buffer as floats (bf16, fp8 e4m3 or f32 storage).
inline std::vector<float> read_device(const void* d, size_t n, int elem_bytes, bool fp8 = false) {
    std::vector<uint8_t> raw(n * size_t(elem_bytes));
    QS_CUDA_CHECK(cudaDeviceSynchronize());
    QS_CUDA_CHECK(cudaMemcpy(raw.data(), d, raw.size(), cudaMemcpyDeviceToHost));
    std::vector<float> out(n);
    for (size_t i = 0; i < n; ++i) {
        if (elem_bytes == 4) std::memcpy(&out[i], raw.data() + 4 * i, 4);
        else if (elem_bytes == 2) out[i] = bf16_to_f32(bf16{uint16_t(raw[2 * i] | (raw[2 * i + 1] << 8))});
        else out[i] = fp8e4m3_to_f32(fp8e4m3{raw[i]});
        (void)fp8;
    }
    return out;
}

}  // namespace qs::gpu_test

// The tensor-core router (router_gemm.h, CudaOptions::moe_router_kernel 1)
// against a float64 CPU reference, and CudaOps::moe with it against
// CpuOps::moe. Bound for the logits: max |y − ref| / max |ref| < 2e-5. The
// kernel splits x exactly into three bf16 terms and W into bf16 hi + lo, so
// with a bf16 router every product is exact and only the fp32 accumulation
// rounds; an fp32 router keeps W to 2⁻¹⁷ (~5e-6 of the scale; cuBLAS's fp32
// GEMM is at ~1e-6 here); a missing lo product of W would leave ~2⁻⁹ ≈ 2e-3
// per product (~1e-3 of the scale), 50× the bound.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu/cpu_ops.h"
#include "backend/cuda/router_gemm.h"
#include "config/model_config.h"
#include "gpu_test_util.h"
#include "model/weights.h"

using namespace qs;
using gpu_test::normalised_error;

namespace {

constexpr double kRouterBound = 2e-5;
constexpr double kBf16Bound = 1e-2;  // cuda_ops_parity_test.cpp's MoE bound

ModelConfig real_shapes() {
    ModelConfig c = qwen36_35b_a3b_config();
    // All 256 experts and H = 2,048 (the router's real shape); one layer, small
    // experts and vocabulary keep the dummy weights small: routing is the
    // subject.
    c.num_hidden_layers = 1;
    c.layer_types.resize(1);
    c.moe_intermediate_size = 128;
    c.shared_expert_intermediate_size = 128;
    c.vocab_size = 4096;
    return c;
}

struct Case {
    std::string name;
    ModelConfig config;
};
void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

class CudaRouter : public ::testing::TestWithParam<Case> {
protected:
    void SetUp() override {
        QS_REQUIRE_GPU();
        config_ = GetParam().config;
        weights_ = std::make_unique<ModelWeights>(make_dummy_weights(config_, 91, /*with_mtp=*/false));
    }
    ModelConfig config_;
    std::unique_ptr<ModelWeights> weights_;
    std::mt19937 rng_{12345};
};

// [E + 1, H] fp32: the router's rows, then the shared-expert gate's.
std::vector<float> router_rows(const MoeWeights& m) {
    const int64_t E = m.router.out_features, H = m.router.in_features;
    std::vector<float> w(size_t((E + 1) * H));
    for (int64_t r = 0; r < E; ++r) m.router.row_to_f32(r, w.data() + r * H);
    m.shared_expert_gate.row_to_f32(0, w.data() + E * H);
    return w;
}

// max |got − ref| / max |ref| for logits [T, E] and gate [T] against ref [T, E
// + 1] (double).
std::pair<double, double> max_errors(const std::vector<float>& logits, const std::vector<float>& gate,
                                     const std::vector<double>& ref, int64_t T, int64_t E) {
    double e1 = 0, r1 = 0, e2 = 0, r2 = 0;
    for (int64_t t = 0; t < T; ++t) {
        for (int64_t e = 0; e < E; ++e) {
            const double r = ref[size_t(t * (E + 1) + e)], y = logits[size_t(t * E + e)];
            if (!std::isfinite(y)) return {INFINITY, INFINITY};
            e1 = std::max(e1, std::fabs(y - r)), r1 = std::max(r1, std::fabs(r));
        }
        const double r = ref[size_t(t * (E + 1) + E)], y = gate[size_t(t)];
        if (!std::isfinite(y)) return {INFINITY, INFINITY};
        e2 = std::max(e2, std::fabs(y - r)), r2 = std::max(r2, std::fabs(r));
    }
    // The gate is row E of the same [E + 1, H] product: its error is measured on the scale of the
    // whole product (max |ref| over the logits and the gate). On its own scale, one gate value per
    // token, a gate near zero by cancellation reads as a large relative error (H200: 2.1e-5 at T = 1
    // against a gate of small magnitude) that says nothing about the kernel.
    const double scale = std::max({r1, r2, 1e-30});
    return {e1 / std::max(r1, 1e-30), e2 / scale};
}

}  // namespace

// The device copies DeviceWeights made (router_hi / router_lo) through
// launch_router_logits, at odd and even T, every tile variant, against float64
// logits of the model's fp32 router.
TEST_P(CudaRouter, LogitsMatchFloat64) {
    cuda::CudaOptions o;
    o.poison = true;
    o.moe_router_kernel = 1;
    cuda::CudaOps gpu(o);
    gpu.prepare_weights(weight_set(*weights_));
    const MoeWeights& m = weights_->layers[0].moe;
    const cuda::DeviceExperts& d = gpu.weights().experts(m);
    const int64_t E = config_.num_experts, H = config_.hidden_size;
    ASSERT_TRUE(cuda::router_logits_supported(E, H));
    ASSERT_NE(d.router_hi, nullptr) << "moe_router_kernel 1 uploaded no split router";
    EXPECT_EQ(d.router_lo, nullptr) << "the dummy router is bf16: its lo part is zero";
    // Also dense fp32 rows (Wl != 0: the three-product kernel), split and
    // uploaded here.
    std::vector<float> dense = gpu_test::random_floats(size_t((E + 1) * H), rng_, 0.05f);
    std::vector<uint16_t> hi, lo;
    ASSERT_TRUE(cuda::router_split_weights(dense, E + 1, cuda::router_padded_rows(E), H, hi, lo));
    cuda::DeviceBuffer dhi(hi.size() * 2), dlo(lo.size() * 2);
    QS_CUDA_CHECK(cudaMemcpy(dhi.get(), hi.data(), hi.size() * 2, cudaMemcpyHostToDevice));
    QS_CUDA_CHECK(cudaMemcpy(dlo.get(), lo.data(), lo.size() * 2, cudaMemcpyHostToDevice));
    for (bool model_rows : {true, false}) {
        const std::vector<float> w = model_rows ? router_rows(m) : dense;
        const uint16_t* w_hi = model_rows ? d.router_hi : dhi.as<uint16_t>();
        const uint16_t* w_lo = model_rows ? d.router_lo : dlo.as<uint16_t>();
        const std::string which = model_rows ? "model bf16 rows" : "dense fp32 rows";
        for (int64_t T : {1, 7, 64, 129, 1000, 2500}) {
            const auto x = gpu_test::random_floats(size_t(T * H), rng_);
            std::vector<double> ref(size_t(T * (E + 1)));
            for (int64_t t = 0; t < T; ++t)
                for (int64_t e = 0; e <= E; ++e) {
                    double s = 0;
                    for (int64_t k = 0; k < H; ++k) s += double(x[size_t(t * H + k)]) * double(w[size_t(e * H + k)]);
                    ref[size_t(t * (E + 1) + e)] = s;
                }
            for (int variant : {0, 1, 2, 3}) {
                float* dx = gpu_test::to_device(gpu, x);
                float* dl = gpu.alloc(T * E);  // poisoned: NaN
                float* dg = gpu.alloc(T);
                cuda::launch_router_logits(dx, T, H, w_hi, w_lo, E, dl, dg, gpu.stream(), variant);
                const auto [el, eg] = max_errors(gpu_test::to_host(gpu, dl, size_t(T * E)),
                                                 gpu_test::to_host(gpu, dg, size_t(T)), ref, T, E);
                EXPECT_LT(el, kRouterBound) << which << ": router logits T=" << T << " variant " << variant;
                EXPECT_LT(eg, kRouterBound) << which << ": shared gate T=" << T << " variant " << variant;
                if (variant == 0)
                    std::printf("[router] %s %s T=%lld: logits %.3e gate %.3e\n", GetParam().name.c_str(),
                                which.c_str(), (long long)T, el, eg);
                gpu.free_all();
            }
        }
    }
}

// CudaOps::moe with the option on against CpuOps::moe (the parity test's bound
// and sizes, plus prefill-sized calls: the kernel runs from router_kernel_min_rows
// rows on (6,144 with a bf16 router, 8,192 with an fp32 one), cuBLAS below) and
// against the option off (same routing expected: the logits differ by ~1e-5 of
// their scale, so y agrees to far below the bf16 bound).
TEST_P(CudaRouter, MoeWithRouterKernelMatchesCpu) {
    cuda::CudaOptions on, off;
    on.poison = off.poison = true;
    on.moe_router_kernel = 1;
    off.moe_router_kernel = 0;
    cuda::CudaOps g1(on), g0(off);
    g1.prepare_weights(weight_set(*weights_));
    g0.prepare_weights(weight_set(*weights_));
    CpuOps cpu;
    const MoeWeights& m = weights_->layers[0].moe;
    const int64_t k = config_.num_experts_per_tok, H = config_.hidden_size;
    for (int64_t T : {int64_t(1), int64_t(64), int64_t(1025), cuda::kRouterKernelMinRowsBf16,
                      cuda::kRouterKernelMinRowsF32 + 3}) {
        const auto x = gpu_test::random_floats(size_t(T * H), rng_);
        std::vector<float> ref(x.size());
        cpu.moe(x.data(), T, m, k, config_.norm_topk_prob, ref.data());
        float* dy1 = g1.alloc(int64_t(ref.size()));
        g1.moe(gpu_test::to_device(g1, x), T, m, k, config_.norm_topk_prob, dy1);
        const std::vector<float> y1 = gpu_test::to_host(g1, dy1, ref.size());
        float* dy0 = g0.alloc(int64_t(ref.size()));
        g0.moe(gpu_test::to_device(g0, x), T, m, k, config_.norm_topk_prob, dy0);
        const std::vector<float> y0 = gpu_test::to_host(g0, dy0, ref.size());
        EXPECT_LT(normalised_error(y1, ref), kBf16Bound) << "T=" << T;
        EXPECT_LT(normalised_error(y1, y0), kBf16Bound) << "T=" << T << " vs moe_router_kernel 0";
        std::printf("[router] %s T=%lld: on vs cpu %.3e, off vs cpu %.3e, on vs off %.3e\n", GetParam().name.c_str(),
                    (long long)T, normalised_error(y1, ref), normalised_error(y0, ref), normalised_error(y1, y0));
        g1.free_all();
        g0.free_all();
    }
}

TEST(CudaRouterOptions, RejectsUnknownVersion) {
    QS_REQUIRE_GPU();
    // Threadsafe style: the child re-executes the binary instead of forking a process that holds a
    // CUDA context (a forked child's cudaSetDevice fails before the option check).
    GTEST_FLAG_SET(death_test_style, "threadsafe");
    cuda::CudaOptions o;
    o.moe_router_kernel = 3;
    EXPECT_DEATH(cuda::CudaOps ops(o), "moe_router_kernel must be 0, 1 or 2");
}

INSTANTIATE_TEST_SUITE_P(Shapes, CudaRouter,
                         ::testing::Values(Case{"tiny", tiny_model_config()}, Case{"real", real_shapes()}),
                         [](const auto& info) { return info.param.name; });

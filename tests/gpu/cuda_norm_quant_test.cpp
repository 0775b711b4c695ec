// The layer's input norm writing h's FP8 quantisation for the block-scaled projections in its own
// launch (CudaOptions::fused_norm_quant; Gemm::norm_for_linears; launch_residual_rms_norm_quant):
//  - the kernel alone: h, the codes and the scales bitwise what launch_residual_rms_norm_zc then
//    launch_quant_fp8_rows128 write, padding rows included (T = 1, 5, 130 of 2,048 columns, 4,096
//    and 384 columns), with and without the pending addend, with rows whose groups differ in scale
//    by 2^10 and exact zeros (scale 1), and the row sum kept (x_out);
//  - rms_norm_linears at the real shapes with FP8 weights (attention q/k/v, GDN qkv/z/b/a) at
//    cuBLASLt's row counts: h and every output bitwise equal with the option at 0 and 1; with 1 the
//    norm made the quantisation (Gemm::norm_quants) and the block-scaled GEMMs ran; x and pending
//    unchanged.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "backend/cuda/basic_kernels.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/gemm.h"
#include "config/model_config.h"
#include "gpu_test_util.h"
#include "norm_linears_run.h"
#include "model/weights.h"

using namespace qs;
using gpu_test::real_shapes;

namespace {

bool same_bits(const void* a, const void* b, size_t bytes) { return std::memcmp(a, b, bytes) == 0; }

template <class T>
std::vector<T> download(const void* d, size_t n) {
    std::vector<T> h(n);
    QS_CUDA_CHECK(cudaDeviceSynchronize());
    QS_CUDA_CHECK(cudaMemcpy(h.data(), d, n * sizeof(T), cudaMemcpyDeviceToHost));
    return h;
}

}  // namespace

TEST(CudaNormQuant, KernelSameBitsAsNormThenQuantisation) {
    QS_REQUIRE_GPU();
    cuda::CudaOptions o;
    o.poison = true;
    cuda::CudaOps ops(o);
    std::mt19937 rng{4242};
    for (const int64_t n : {2048, 4096, 384}) {
        for (const int64_t T : {1, 5, 130}) {
            for (const bool with_pending : {false, true}) {
                const std::string what = "n=" + std::to_string(n) + " T=" + std::to_string(T) +
                                         (with_pending ? " with pending" : "");
                const int64_t T_pad = cuda::Gemm::fp8_padded_rows(T);
                auto x = gpu_test::random_floats(size_t(T * n), rng, 2.0f);
                // Groups far apart in scale, and an all-zero group (its scale is 1).
                for (int64_t t = 0; t < T; ++t) {
                    for (int64_t c = 0; c < 128; ++c) x[size_t(t * n + c)] *= 1024.0f;
                    if (n >= 384)
                        for (int64_t c = 256; c < 384; ++c) x[size_t(t * n + c)] = 0.0f;
                }
                const auto pending = gpu_test::random_floats(size_t(T * n), rng, 1.0f);
                const auto w = gpu_test::random_floats(size_t(n), rng, 0.3f);
                float* dw = gpu_test::to_device(ops, w);
                float* dp = with_pending ? gpu_test::to_device(ops, pending) : nullptr;
                struct Out {
                    std::vector<float> h, sum, scales;
                    std::vector<uint8_t> q;
                };
                auto run = [&](bool fused) {
                    float* dx = gpu_test::to_device(ops, x);
                    float* sum = ops.alloc(T * n);
                    float* h = ops.alloc(T * n);
                    auto* q = reinterpret_cast<uint8_t*>(ops.alloc((T_pad * n + 3) / 4));
                    float* scales = ops.alloc(T_pad * (n / 128));
                    QS_CUDA_CHECK(cudaMemsetAsync(q, 0x5a, size_t(T_pad * n), ops.stream()));
                    if (fused) {
                        cuda::launch_residual_rms_norm_quant(dx, dp, nullptr, sum, dw, T, n, 1e-6f, h, T_pad, q, scales,
                                                             ops.stream());
                    } else {
                        cuda::launch_residual_rms_norm_zc(dx, dp, nullptr, sum, dw, T, n, 1e-6f, h, ops.stream());
                        cuda::launch_quant_fp8_rows128(h, T, n, T_pad, q, scales, ops.stream());
                    }
                    Out r;
                    r.h = download<float>(h, size_t(T * n));
                    r.sum = download<float>(sum, size_t(T * n));
                    r.q = download<uint8_t>(q, size_t(T_pad * n));
                    r.scales = download<float>(scales, size_t(T_pad * (n / 128)));
                    return r;
                };
                const Out a = run(false), b = run(true);
                EXPECT_TRUE(same_bits(a.h.data(), b.h.data(), a.h.size() * 4)) << what << ": h";
                EXPECT_TRUE(same_bits(a.sum.data(), b.sum.data(), a.sum.size() * 4)) << what << ": the kept sum";
                EXPECT_TRUE(a.q == b.q) << what << ": codes";
                EXPECT_TRUE(same_bits(a.scales.data(), b.scales.data(), a.scales.size() * 4)) << what << ": scales";
                // The padding rows: zero codes, scale 1; the zero group: scale 1; the loud group's
                // scale 2^10-ish times a quiet one's.
                for (int64_t t = T; t < T_pad; ++t)
                    for (int64_t g = 0; g < n / 128; ++g) EXPECT_EQ(b.scales[size_t(g * T_pad + t)], 1.0f) << what;
                for (int64_t i = T * n; i < T_pad * n; ++i) ASSERT_EQ(b.q[size_t(i)], 0) << what << " padding code " << i;
                if (!with_pending && n >= 384) {
                    EXPECT_EQ(b.scales[size_t(2 * T_pad)], 1.0f) << what << ": zero group";
                }
                EXPECT_GT(b.scales[0], 100.0f * b.scales[size_t(T_pad)]) << what << ": loud group 0 against group 1";
                ops.free_all();
            }
        }
    }
}

TEST(CudaNormQuant, RmsNormLinearsSameBitsWithTheOptionOnAndOff) {
    QS_REQUIRE_GPU();
    ModelWeights w = make_dummy_weights(real_shapes(8), 94, /*with_mtp=*/false, WeightFormat::kFP8Block);
    auto options = [](int on) {
        cuda::CudaOptions o;
        o.poison = true;
        o.fused_norm_quant = on;
        return o;
    };
    cuda::CudaOps off(options(0)), on(options(1));
    off.prepare_weights(weight_set(w));
    on.prepare_weights(weight_set(w));
    const std::vector<gpu_test::NormLinearsGroup> groups = gpu_test::input_norm_groups(w);
    ASSERT_EQ(groups.size(), 2u);
    const int64_t H = w.config.hidden_size;
    const double eps = w.config.rms_norm_eps;
    std::mt19937 rng{616};
    for (const int64_t T : {5, 64, 130, 1000}) {
        for (const gpu_test::NormLinearsGroup& g : groups) {
            for (const bool with_pending : {false, true}) {
                const std::string what = std::string(g.name) + " T=" + std::to_string(T) +
                                         (with_pending ? " with pending" : "");
                const auto x = gpu_test::random_floats(size_t(T * H), rng, 3.0f);
                const auto pending = gpu_test::random_floats(size_t(T * H), rng, 1.5f);
                auto run = [&](cuda::CudaOps& ops) {
                    return gpu_test::run_rms_norm_linears(ops, *g.norm, g.ws, x, with_pending ? &pending : nullptr, T, H,
                                                          eps);
                };
                const int64_t made_before = on.gemm().norm_quants();
                const int64_t block_before = on.gemm().fp8_counts().block_scaled;
                const gpu_test::NormLinearsRun a = run(off), b = run(on);
                EXPECT_EQ(on.gemm().norm_quants() - made_before, 1) << what << ": the norm did not quantise h";
                EXPECT_GE(on.gemm().fp8_counts().block_scaled - block_before, 2) << what << ": block-scaled GEMMs";
                EXPECT_EQ(off.gemm().norm_quants(), 0) << what;
                EXPECT_TRUE(same_bits(a.h.data(), b.h.data(), a.h.size() * 4)) << what << ": h differs";
                for (size_t i = 0; i < g.ws.size(); ++i)
                    EXPECT_TRUE(same_bits(a.ys[i].data(), b.ys[i].data(), a.ys[i].size() * 4))
                        << what << ": output " << i << " differs";
                EXPECT_TRUE(same_bits(b.x.data(), x.data(), x.size() * 4)) << what << ": x was written";
                if (with_pending) {
                    EXPECT_TRUE(same_bits(b.pending.data(), pending.data(), pending.size() * 4))
                        << what << ": pending was written";
                }
            }
        }
    }
}

TEST(CudaNormQuant, OptionValidated) {
    QS_REQUIRE_GPU();
    GTEST_FLAG_SET(death_test_style, "threadsafe");  // the parent has a CUDA context: the child re-executes
    cuda::CudaOptions o;
    EXPECT_EQ(o.fused_norm_quant, 1);  // on by default
    o.fused_norm_quant = 2;
    EXPECT_DEATH(cuda::CudaOps ops(o), "fused_norm_quant must be 0 or 1");
}

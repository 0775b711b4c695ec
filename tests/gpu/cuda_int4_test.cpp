// INT4 W4A16 on the GPU (issue 18 item 4): the CUDA backend on INT4 weights (the real model's
// shapes, 4 layers, 32 experts; make_dummy_weights kIntGroup = what `qwenserve quantize --format
// int4-w4a16` writes) against the CPU specification (CpuOps on the same weights, dequantised
// exactly). Linears of up to kInt4LinearMaxRows rows must take the packed INT4 kernel
// (int4_linear_kernels.h), larger T the BF16 copy; the MoE small-T path (T <= 8) the INT4 experts
// (moe_small_int4.cu), v1 and v2, larger T the BF16 grouped GEMMs, or with
// CudaOptions::moe_int4_grouped the INT4 tensor-core grouped GEMMs (moe_decode_gemm_int4.cu). x
// (and h) are rounded to bf16 on the GPU, W is exact: bound 1e-2 as the BF16 paths
// (cuda_ops_parity_test.cpp). Also the kernel on weights packed by compressed-tensors itself
// (tests/data/quant/ct_int4's experts).
#include <gtest/gtest.h>

#include "backend/cpu/cpu_ops.h"
#include "backend/cuda/device_memory.h"
#include "backend/cuda/int4_linear_kernels.h"
#include "backend/int4_layout.h"
#include "config/model_config.h"
#include "gpu_test_util.h"
#include "model/weights.h"

using namespace qs;
using gpu_test::normalised_error;

namespace {

constexpr double kBound = 1e-2;

ModelConfig real_shapes() {
    ModelConfig c = qwen36_35b_a3b_config();
    c.num_hidden_layers = 4;
    c.layer_types.resize(4);
    c.num_experts = 32;
    return c;
}

class CudaInt4 : public ::testing::Test {
protected:
    void SetUp() override {
        QS_REQUIRE_GPU();
        config_ = real_shapes();
        weights_ = std::make_unique<ModelWeights>(make_dummy_weights(config_, 91, false, WeightFormat::kIntGroup));
        cuda::CudaOptions o;
        o.poison = true;
        o.moe_int4_grouped = 0;  // the BF16 copies above the small-T path: MoeInt4GroupedGemm's baseline
        gpu_ = std::make_unique<cuda::CudaOps>(o);
        gpu_->prepare_weights(weight_set(*weights_));
    }
    ModelConfig config_;
    std::unique_ptr<ModelWeights> weights_;
    std::unique_ptr<cuda::CudaOps> gpu_;
    CpuOps cpu_;
    std::mt19937 rng_{5};
};

TEST_F(CudaInt4, LinearsTakeTheInt4KernelUpTo8Rows) {
    const DecoderLayerWeights* attn = nullptr;
    const DecoderLayerWeights* gdn = nullptr;
    for (const auto& l : weights_->layers) (l.type == LayerType::kFullAttention ? attn : gdn) = &l;
    ASSERT_TRUE(attn && gdn);
    const std::vector<std::pair<const char*, const LinearWeight*>> linears = {
        {"q_proj", &attn->attn.q_proj},     {"k_proj", &attn->attn.k_proj},     {"o_proj", &attn->attn.o_proj},
        {"in_proj_qkv", &gdn->gdn.in_proj_qkv}, {"in_proj_z", &gdn->gdn.in_proj_z}, {"out_proj", &gdn->gdn.out_proj}};
    for (int64_t T : {1, 2, 3, 8, 9, 64}) {
        for (const auto& [name, w] : linears) {
            ASSERT_EQ(w->format, WeightFormat::kIntGroup) << name;
            const int64_t before = gpu_->gemm().int4_calls();
            const auto x = gpu_test::random_floats(size_t(T * w->in_features), rng_);
            std::vector<float> ref(size_t(T * w->out_features));
            cpu_.linear(x.data(), T, *w, ref.data());
            float* dy = gpu_->alloc(T * w->out_features);
            gpu_->linear(gpu_test::to_device(*gpu_, x), T, *w, dy);
            const double err = normalised_error(gpu_test::to_host(*gpu_, dy, ref.size()), ref);
            EXPECT_EQ(gpu_->gemm().int4_calls() > before, T <= cuda::kInt4LinearMaxRows) << name << " T=" << T;
            EXPECT_LT(err, kBound) << name << " T=" << T;
            gpu_->free_all();
        }
    }
}

TEST_F(CudaInt4, MoeSmallTAndGroupedGemm) {
    const MoeWeights& m = weights_->layers[0].moe;
    ASSERT_EQ(m.experts[0].gate_proj.format, WeightFormat::kIntGroup);
    const int64_t k = config_.num_experts_per_tok, H = config_.hidden_size;
    for (int version : {1, 2}) {
        cuda::CudaOptions o;
        o.poison = true;
        o.moe_small_version = version;
        cuda::CudaOps gpu(o);
        gpu.prepare_weights(weight_set(*weights_));
        for (int64_t T : {1, 3, 8, 64}) {
            const auto x = gpu_test::random_floats(size_t(T * H), rng_);
            std::vector<float> ref(x.size());
            cpu_.moe(x.data(), T, m, k, config_.norm_topk_prob, ref.data());
            float* dy = gpu.alloc(int64_t(ref.size()));
            gpu.moe(gpu_test::to_device(gpu, x), T, m, k, config_.norm_topk_prob, dy);
            EXPECT_LT(normalised_error(gpu_test::to_host(gpu, dy, ref.size()), ref), kBound)
                << "v" << version << " T=" << T;
            gpu.free_all();
        }
    }
}

// CudaOptions::moe_int4_grouped = 1: MoE calls of 9..1,024 rows on the tensor-core INT4 grouped
// GEMMs (moe_decode_gemm_int4.cu) instead of the BF16 copies, against the CPU specification; T = 1
// and 8 keep the small-T path (bitwise equal to option 0), T = 9, 64, 300 must take the new kernels
// (their fp32 summation order differs from the BF16 GEMMs': not bitwise equal to option 0), and
// T = 1,025 (above int4_grouped_max_t) keeps the BF16 path (bitwise equal again; no CPU run there).
TEST_F(CudaInt4, MoeInt4GroupedGemm) {
    const MoeWeights& m = weights_->layers[0].moe;
    const int64_t k = config_.num_experts_per_tok, H = config_.hidden_size;
    cuda::CudaOptions o;
    o.poison = true;
    o.moe_int4_grouped = 1;
    cuda::CudaOps gpu(o);
    gpu.prepare_weights(weight_set(*weights_));
    for (int64_t T : {1, 8, 9, 64, 300, 1025}) {
        const auto x = gpu_test::random_floats(size_t(T * H), rng_);
        std::vector<float> ref(x.size());
        float* dy = gpu.alloc(int64_t(ref.size()));
        gpu.moe(gpu_test::to_device(gpu, x), T, m, k, config_.norm_topk_prob, dy);
        const std::vector<float> y = gpu_test::to_host(gpu, dy, ref.size());
        if (T <= 1024) {
            cpu_.moe(x.data(), T, m, k, config_.norm_topk_prob, ref.data());
            EXPECT_LT(normalised_error(y, ref), kBound) << "T=" << T;
        }
        float* dy0 = gpu_->alloc(int64_t(ref.size()));  // option 0 (the fixture's CudaOps)
        gpu_->moe(gpu_test::to_device(*gpu_, x), T, m, k, config_.norm_topk_prob, dy0);
        const std::vector<float> y0 = gpu_test::to_host(*gpu_, dy0, ref.size());
        const bool new_path = T > 8 && T <= 1024;
        EXPECT_EQ(y != y0, new_path) << "T=" << T << (new_path ? ": equals the BF16 path bitwise (not taken?)"
                                                              : ": differs from option 0 outside the INT4 grouped range");
        gpu.free_all();
        gpu_->free_all();
    }
}

// compressed-tensors' own packing (ct_int4: symmetric experts, group 16) through the kernel.
TEST(CudaInt4Fixture, KernelOnCompressedTensorsWeights) {
    QS_REQUIRE_GPU();
    auto w = load_model_dir(gpu_test::source_path("tests/data/quant/ct_int4"));
    ASSERT_TRUE(w.is_ok()) << w.status().message();
    const LinearWeight& l = w->layers[0].moe.experts[1].down_proj;
    ASSERT_EQ(int4_layout_unsupported(l), "");
    const Int4DeviceLayout d = int4_device_layout(l);
    std::mt19937 rng(3);
    for (int64_t T : {1, 5, 8}) {
        const auto x = gpu_test::random_floats(size_t(T * l.in_features), rng);
        std::vector<float> ref(size_t(T * l.out_features), 0.0f), row(size_t(l.in_features));
        for (int64_t o = 0; o < l.out_features; ++o) {
            l.row_to_f32(o, row.data());
            for (int64_t t = 0; t < T; ++t) {
                double s = 0;
                for (int64_t i = 0; i < l.in_features; ++i)
                    s += double(row[size_t(i)]) * double(round_to_bf16(x[size_t(t * l.in_features + i)]));
                ref[size_t(t * l.out_features + o)] = float(s);
            }
        }
        cuda::DeviceBuffer codes(d.codes.size() * 4), scales(d.scales.size() * 2), dx(x.size() * 4),
            dy(ref.size() * 4);
        QS_CUDA_CHECK(cudaMemcpy(codes.get(), d.codes.data(), d.codes.size() * 4, cudaMemcpyHostToDevice));
        QS_CUDA_CHECK(cudaMemcpy(scales.get(), d.scales.data(), d.scales.size() * 2, cudaMemcpyHostToDevice));
        QS_CUDA_CHECK(cudaMemcpy(dx.get(), x.data(), x.size() * 4, cudaMemcpyHostToDevice));
        cuda::launch_int4_linear(static_cast<const uint32_t*>(codes.get()), static_cast<const uint16_t*>(scales.get()),
                                 l.out_features, l.in_features, d.group, static_cast<const float*>(dx.get()), T,
                                 static_cast<float*>(dy.get()), nullptr);
        std::vector<float> y(ref.size());
        QS_CUDA_CHECK(cudaMemcpy(y.data(), dy.get(), y.size() * 4, cudaMemcpyDeviceToHost));
        EXPECT_LT(normalised_error(y, ref), 1e-5) << "T=" << T;  // the same bf16 x: fp32 vs double sums
    }
}

}  // namespace

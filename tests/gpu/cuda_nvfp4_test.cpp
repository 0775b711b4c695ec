// NVFP4 read as 4-bit on the GPU (issue 18 item 4; CudaOptions::nvfp4_kernels): the 4-bit
// kernels on the device NVFP4 layout (backend/nvfp4_layout.h) against the CPU specification.
//  - The small-rows linear kernel (launch_nvfp4_linear) on the weights ModelOpt and
//    compressed-tensors wrote (tests/data/quant/modelopt_nvfp4, ct_nvfp4: both global-scale
//    conventions) against LinearWeight::row_to_f32 and fp32-rounded-to-bf16 x in double: bound
//    1e-5 (fp32 sums; the layout's weights are within one fp32 ulp of row_to_f32's).
//  - The CUDA backend on the real model's shapes (4 layers, 32 experts) with the dummy BF16 weights
//    quantised to NVFP4 here as `qwenserve quantize --format nvfp4` does (low_bit_rtn.h,
//    compressed-tensors' global convention): linears of up to 8 rows must take the NVFP4 kernel
//    with the option and never without it, the MoE small-T path (v1, v2) the NVFP4 experts; every
//    result against the CPU specification (CpuOps on the same NVFP4 weights, dequantised exactly):
//    bound 1e-2 as the BF16 paths (x and h rounded to bf16 on the GPU). Larger calls keep the BF16
//    copies: bitwise equal to the option off.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "backend/cpu/cpu_ops.h"
#include "backend/cuda/device_memory.h"
#include "backend/cuda/int4_linear_kernels.h"
#include "backend/nvfp4_layout.h"
#include "config/model_config.h"
#include "core/dtype.h"
#include "gpu_test_util.h"
#include "model/low_bit_rtn.h"
#include "model/qwen36.h"
#include "model/weights.h"

using namespace qs;
using gpu_test::real_shapes;
using gpu_test::normalised_error;

namespace {

constexpr double kBound = 1e-2;

// y [T, out] = x · Wᵀ in double, W from row_to_f32, x rounded to bf16 (as the kernel rounds it).
std::vector<float> reference_linear(const LinearWeight& l, const std::vector<float>& x, int64_t T) {
    std::vector<float> ref(size_t(T * l.out_features)), row(size_t(l.in_features));
    for (int64_t o = 0; o < l.out_features; ++o) {
        l.row_to_f32(o, row.data());
        for (int64_t t = 0; t < T; ++t) {
            double s = 0;
            for (int64_t i = 0; i < l.in_features; ++i)
                s += double(row[size_t(i)]) * double(round_to_bf16(x[size_t(t * l.in_features + i)]));
            ref[size_t(t * l.out_features + o)] = float(s);
        }
    }
    return ref;
}

void check_fixture_linear(const LinearWeight& l, const char* what) {
    ASSERT_EQ(nvfp4_layout_unsupported(l), "") << what;
    const Nvfp4DeviceLayout d = nvfp4_device_layout(l);
    std::mt19937 rng(3);
    for (int64_t T : {1, 5, 8}) {
        const auto x = gpu_test::random_floats(size_t(T * l.in_features), rng);
        const std::vector<float> ref = reference_linear(l, x, T);
        cuda::DeviceBuffer codes(d.codes.size() * 4), scales(d.scales.size() * 2), dx(x.size() * 4),
            dy(ref.size() * 4);
        QS_CUDA_CHECK(cudaMemcpy(codes.get(), d.codes.data(), d.codes.size() * 4, cudaMemcpyHostToDevice));
        QS_CUDA_CHECK(cudaMemcpy(scales.get(), d.scales.data(), d.scales.size() * 2, cudaMemcpyHostToDevice));
        QS_CUDA_CHECK(cudaMemcpy(dx.get(), x.data(), x.size() * 4, cudaMemcpyHostToDevice));
        cuda::launch_nvfp4_linear(static_cast<const uint32_t*>(codes.get()), static_cast<const uint16_t*>(scales.get()),
                                  d.global, l.out_features, l.in_features, static_cast<const float*>(dx.get()), T,
                                  static_cast<float*>(dy.get()), nullptr);
        std::vector<float> y(ref.size());
        QS_CUDA_CHECK(cudaMemcpy(y.data(), dy.get(), y.size() * 4, cudaMemcpyDeviceToHost));
        EXPECT_LT(normalised_error(y, ref), 1e-5) << what << " T=" << T;
    }
}

TEST(CudaNvfp4Fixture, KernelOnModelOptAndCompressedTensorsWeights) {
    QS_REQUIRE_GPU();
    for (const char* name : {"modelopt_nvfp4", "ct_nvfp4"}) {
        auto w = load_model_dir(gpu_test::source_path(std::string("tests/data/quant/") + name));
        ASSERT_TRUE(w.is_ok()) << w.status().message();
        const MoeWeights& m = w->layers[0].moe;
        check_fixture_linear(m.experts[1].down_proj, name);
        check_fixture_linear(m.experts[0].gate_proj, name);
        check_fixture_linear(m.shared_expert.up_proj, name);
    }
}

// Replaces a BF16 linear by its NVFP4 quantisation (compressed-tensors' convention: the global
// divides), storage owned by the weight.
void to_nvfp4(LinearWeight& w) {
    const int64_t out = w.out_features, in = w.in_features;
    std::vector<float> all(size_t(out * in));
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < out; ++r) w.row_to_f32(r, all.data() + size_t(r * in));
    float amax = 0.0f;
    for (float v : all) amax = std::max(amax, std::fabs(v));
    const float global = nvfp4_global_scale(amax);
    auto codes = std::shared_ptr<uint8_t[]>(new uint8_t[size_t(out * in / 2)]);
    auto scales = std::shared_ptr<uint8_t[]>(new uint8_t[size_t(out * in / 16)]);
    bool ok = true;
    constexpr int64_t kRows = 64;  // row blocks quantised in parallel (each row depends on the global only)
#pragma omp parallel for schedule(static) reduction(&& : ok)
    for (int64_t r0 = 0; r0 < out; r0 += kRows) {
        const int64_t n = std::min(kRows, out - r0);
        ok = ok && quantize_nvfp4_rows(all.data() + size_t(r0 * in), n, in, global, codes.get() + r0 * in / 2,
                                       scales.get() + r0 * in / 16);
    }
    ASSERT_TRUE(ok);
    w.format = WeightFormat::kNvfp4;
    w.weight = WeightBuffer{DType::kU8, {out, in / 2}, codes.get(), std::shared_ptr<const void>(codes, codes.get()), {}};
    w.scales = WeightBuffer{DType::kF8E4M3, {out, in / 16}, scales.get(), std::shared_ptr<const void>(scales, scales.get()), {}};
    w.global_scale = global;
    w.nvfp4_global = Nvfp4Global::kDivide;
}

// The dummy BF16 model with the modules `quantize --format nvfp4` quantises made NVFP4: attention
// and GDN projections (not in_proj_a/b), every expert and the shared expert.
ModelWeights& nvfp4_weights() {
    static ModelWeights w = [] {
        ModelWeights m = make_dummy_weights(real_shapes(), 91, false, WeightFormat::kDense);
        for (DecoderLayerWeights& l : m.layers) {
            if (l.type == LayerType::kFullAttention) {
                for (LinearWeight* x : {&l.attn.q_proj, &l.attn.k_proj, &l.attn.v_proj, &l.attn.o_proj}) to_nvfp4(*x);
            } else {
                for (LinearWeight* x : {&l.gdn.in_proj_qkv, &l.gdn.in_proj_z, &l.gdn.out_proj}) to_nvfp4(*x);
            }
            for (ExpertWeights& e : l.moe.experts)
                for (LinearWeight* x : {&e.gate_proj, &e.up_proj, &e.down_proj}) to_nvfp4(*x);
            for (LinearWeight* x : {&l.moe.shared_expert.gate_proj, &l.moe.shared_expert.up_proj,
                                    &l.moe.shared_expert.down_proj})
                to_nvfp4(*x);
        }
        return m;
    }();
    return w;
}

class CudaNvfp4 : public ::testing::Test {
protected:
    void SetUp() override {
        QS_REQUIRE_GPU();
        weights_ = &nvfp4_weights();
        config_ = weights_->config;
    }
    std::unique_ptr<cuda::CudaOps> make(int nvfp4_kernels, int small_version = -1, int linear_version = 3,
                                        int gate_up_version = 1) {
        cuda::CudaOptions o;
        o.poison = true;
        o.nvfp4_kernels = nvfp4_kernels;
        o.moe_small_version = small_version;
        o.int4_linear_version = linear_version;
        o.moe_small_int4_gate_up_version = gate_up_version;
        auto gpu = std::make_unique<cuda::CudaOps>(o);
        gpu->prepare_weights(weight_set(*weights_));
        return gpu;
    }
    ModelConfig config_;
    ModelWeights* weights_ = nullptr;
    CpuOps cpu_;
    std::mt19937 rng_{5};
};

TEST_F(CudaNvfp4, LinearsTakeTheNvfp4KernelUpTo8Rows) {
    const DecoderLayerWeights* attn = nullptr;
    const DecoderLayerWeights* gdn = nullptr;
    for (const auto& l : weights_->layers) (l.type == LayerType::kFullAttention ? attn : gdn) = &l;
    ASSERT_TRUE(attn && gdn);
    const std::vector<std::pair<const char*, const LinearWeight*>> linears = {
        {"q_proj", &attn->attn.q_proj},     {"k_proj", &attn->attn.k_proj},     {"o_proj", &attn->attn.o_proj},
        {"in_proj_qkv", &gdn->gdn.in_proj_qkv}, {"in_proj_z", &gdn->gdn.in_proj_z}, {"out_proj", &gdn->gdn.out_proj}};
    auto on = make(1), off = make(0);
    for (int64_t T : {1, 2, 3, 8, 9, 64}) {
        for (const auto& [name, w] : linears) {
            ASSERT_EQ(w->format, WeightFormat::kNvfp4) << name;
            const int64_t before = on->gemm().nvfp4_calls();
            const auto x = gpu_test::random_floats(size_t(T * w->in_features), rng_);
            std::vector<float> ref(size_t(T * w->out_features));
            cpu_.linear(x.data(), T, *w, ref.data());
            float* dy = on->alloc(T * w->out_features);
            on->linear(gpu_test::to_device(*on, x), T, *w, dy);
            const std::vector<float> y = gpu_test::to_host(*on, dy, ref.size());
            EXPECT_EQ(on->gemm().nvfp4_calls() > before, T <= cuda::kInt4LinearMaxRows) << name << " T=" << T;
            EXPECT_LT(normalised_error(y, ref), kBound) << name << " T=" << T;
            float* dy0 = off->alloc(T * w->out_features);
            off->linear(gpu_test::to_device(*off, x), T, *w, dy0);
            const std::vector<float> y0 = gpu_test::to_host(*off, dy0, ref.size());
            EXPECT_LT(normalised_error(y0, ref), kBound) << name << " T=" << T << " (option off)";
            if (T > cuda::kInt4LinearMaxRows) {
                EXPECT_TRUE(y == y0) << name << " T=" << T << ": not the BF16 copy";
            }
            on->free_all();
            off->free_all();
        }
    }
    EXPECT_EQ(off->gemm().nvfp4_calls(), 0);
}

// The MoE small-T path on NVFP4 experts (v1, v2) against the CPU specification; T = 64 keeps the
// BF16 copies (bitwise the option off); T <= 8 must differ from the option off (it reads other
// weights' bits: the 4-bit codes, not the BF16 copies, and sums in another order).
TEST_F(CudaNvfp4, MoeSmallT) {
    const MoeWeights& m = weights_->layers[0].moe;
    ASSERT_EQ(m.experts[0].gate_proj.format, WeightFormat::kNvfp4);
    const int64_t k = config_.num_experts_per_tok, H = config_.hidden_size;
    auto off = make(0, 1);
    for (int version : {1, 2}) {
        auto gpu = make(1, version);
        for (int64_t T : {1, 3, 8, 64}) {
            const auto x = gpu_test::random_floats(size_t(T * H), rng_);
            std::vector<float> ref(x.size());
            cpu_.moe(x.data(), T, m, k, config_.norm_topk_prob, ref.data());
            float* dy = gpu->alloc(int64_t(ref.size()));
            gpu->moe(gpu_test::to_device(*gpu, x), T, m, k, config_.norm_topk_prob, dy);
            const std::vector<float> y = gpu_test::to_host(*gpu, dy, ref.size());
            EXPECT_LT(normalised_error(y, ref), kBound) << "v" << version << " T=" << T;
            if (version == 1) {
                float* dy0 = off->alloc(int64_t(ref.size()));
                off->moe(gpu_test::to_device(*off, x), T, m, k, config_.norm_topk_prob, dy0);
                const std::vector<float> y0 = gpu_test::to_host(*off, dy0, ref.size());
                EXPECT_EQ(y != y0, T <= 8) << "T=" << T;
                off->free_all();
            }
            gpu->free_all();
        }
    }
}

// NVFP4 on the tensor-core kernels (session 40): the small-rows linears at CudaOptions::
// int4_linear_version 4 and the small-T MoE gate_up at moe_small_int4_gate_up_version 2, each 16-column
// block's scale folded into the code pairs (exact), against the CPU specification and the fp32 kernels
// (the same products in another summation order); a linear's token 0 bitwise its one-row call's.
TEST_F(CudaNvfp4, TensorCoreKernels) {
    const DecoderLayerWeights* attn = nullptr;
    const DecoderLayerWeights* gdn = nullptr;
    for (const auto& l : weights_->layers) (l.type == LayerType::kFullAttention ? attn : gdn) = &l;
    ASSERT_TRUE(attn && gdn);
    auto mma = make(1, 2, 4, 2), fma = make(1, 2, 3, 1);
    const std::vector<std::pair<const char*, const LinearWeight*>> linears = {
        {"q_proj", &attn->attn.q_proj}, {"o_proj", &attn->attn.o_proj}, {"in_proj_qkv", &gdn->gdn.in_proj_qkv},
        {"out_proj", &gdn->gdn.out_proj}};
    for (int64_t T : {1, 2, 5, 8}) {
        for (const auto& [name, w] : linears) {
            const auto x = gpu_test::random_floats(size_t(T * w->in_features), rng_);
            std::vector<float> ref(size_t(T * w->out_features));
            cpu_.linear(x.data(), T, *w, ref.data());
            std::vector<float> got[2];
            for (int v : {0, 1}) {
                cuda::CudaOps& g = v == 0 ? *fma : *mma;
                float* dy = g.alloc(T * w->out_features);
                g.linear(gpu_test::to_device(g, x), T, *w, dy);
                got[v] = gpu_test::to_host(g, dy, ref.size());
            }
            float* dy1 = mma->alloc(w->out_features);
            const std::vector<float> x0(x.begin(), x.begin() + w->in_features);
            mma->linear(gpu_test::to_device(*mma, x0), 1, *w, dy1);
            const std::vector<float> row0 = gpu_test::to_host(*mma, dy1, size_t(w->out_features));
            EXPECT_LT(normalised_error(got[1], ref), kBound) << name << " T=" << T;
            EXPECT_LT(normalised_error(got[1], got[0]), 1e-5) << name << " T=" << T;
            EXPECT_TRUE(std::equal(row0.begin(), row0.end(), got[1].begin())) << name << " T=" << T << ": row 0 depends on T";
            mma->free_all();
            fma->free_all();
        }
    }
    EXPECT_GT(mma->gemm().int4_mma_launches(), 0);
    EXPECT_EQ(fma->gemm().int4_mma_launches(), 0);
    const MoeWeights& m = weights_->layers[0].moe;
    const int64_t k = config_.num_experts_per_tok, H = config_.hidden_size;
    for (int64_t T : {1, 3, 8}) {
        const auto x = gpu_test::random_floats(size_t(T * H), rng_);
        std::vector<float> ref(x.size());
        cpu_.moe(x.data(), T, m, k, config_.norm_topk_prob, ref.data());
        std::vector<float> got[2];
        for (int v : {0, 1}) {
            cuda::CudaOps& g = v == 0 ? *fma : *mma;
            float* dy = g.alloc(T * H);
            g.moe(gpu_test::to_device(g, x), T, m, k, config_.norm_topk_prob, dy);
            got[v] = gpu_test::to_host(g, dy, ref.size());
            g.free_all();
        }
        EXPECT_LT(normalised_error(got[1], ref), kBound) << "T=" << T;
        EXPECT_LT(normalised_error(got[1], got[0]), 2e-3) << "T=" << T;
    }
    EXPECT_EQ(mma->moe_small_int4_gate_up_mma_calls(), 3);
    EXPECT_EQ(fma->moe_small_int4_gate_up_mma_calls(), 0);
}

// The packed copies cost their bytes beside the BF16 ones: 0.625 bytes per NVFP4 weight (codes 0.5,
// bf16 scales 2/16) plus the expert tables' globals.
TEST_F(CudaNvfp4, PackedCopyBytes) {
    auto on = make(1), off = make(0);
    int64_t n = 0;
    for (const DecoderLayerWeights& l : weights_->layers) {
        n += l.type == LayerType::kFullAttention
                 ? l.attn.q_proj.out_features * l.attn.q_proj.in_features +
                       l.attn.k_proj.out_features * l.attn.k_proj.in_features +
                       l.attn.v_proj.out_features * l.attn.v_proj.in_features +
                       l.attn.o_proj.out_features * l.attn.o_proj.in_features
                 : l.gdn.in_proj_qkv.out_features * l.gdn.in_proj_qkv.in_features +
                       l.gdn.in_proj_z.out_features * l.gdn.in_proj_z.in_features +
                       l.gdn.out_proj.out_features * l.gdn.out_proj.in_features;
        for (const ExpertWeights* e : {&l.moe.shared_expert})
            n += 3 * e->gate_proj.out_features * e->gate_proj.in_features;
        n += int64_t(l.moe.experts.size()) * 3 * l.moe.experts[0].gate_proj.out_features *
             l.moe.experts[0].gate_proj.in_features;
    }
    const int64_t tables = int64_t(weights_->layers.size()) * (6 * int64_t(sizeof(void*)) + 4 * 3) *
                           (config_.num_experts + 1);
    EXPECT_EQ(int64_t(on->weights().device_bytes() - off->weights().device_bytes()), n / 8 * 5 + tables);
}

}  // namespace

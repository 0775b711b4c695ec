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
//    bound 1e-2 as the BF16 paths (x and h rounded to bf16 on the GPU). Larger linears keep the BF16
//    copies: bitwise equal to the option off; MoE calls of 9..1,024 rows take the 4-bit grouped GEMMs.
//  - NVFP4 experts on the 4-bit grouped GEMMs and without BF16 copies (CudaOptions::moe_int4_scratch):
//    GroupedGemmWithoutBf16Copies.
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
#include "model/single_sequence.h"
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
        cuda::DeviceBuffer codes(d.codes.size() * 4), scales(d.scales.size()), dx(x.size() * 4),
            dy(ref.size() * 4);
        QS_CUDA_CHECK(cudaMemcpy(codes.get(), d.codes.data(), d.codes.size() * 4, cudaMemcpyHostToDevice));
        QS_CUDA_CHECK(cudaMemcpy(scales.get(), d.scales.data(), d.scales.size(), cudaMemcpyHostToDevice));
        QS_CUDA_CHECK(cudaMemcpy(dx.get(), x.data(), x.size() * 4, cudaMemcpyHostToDevice));
        cuda::launch_nvfp4_linear(static_cast<const uint32_t*>(codes.get()), static_cast<const uint8_t*>(scales.get()),
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

// The MoE small-T path on NVFP4 experts (v1, v2) and, at T = 64, the 4-bit grouped GEMMs against the
// CPU specification; every call must differ from the option off (it reads other weights' bits: the
// 4-bit codes, not the BF16 copies, and sums in another order).
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
                EXPECT_NE(y, y0) << "T=" << T << ": the BF16 copies' bits (4-bit kernels not taken?)";
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

// NVFP4 experts on the 4-bit grouped GEMMs (moe_decode_gemm_int4.cu, each lane's 16 K values one
// block: its scale folded into the code pairs, the global once) and without BF16 copies
// (CudaOptions::moe_int4_scratch 1: MoE calls above the grouped GEMMs' 4,096 rows dequantise the layer's
// NVFP4 experts into the scratch first). Against `copies` (BF16 copies, moe_int4_grouped 0: the
// mma.sync BF16 GEMMs from 9 rows): T = 3 on the small-T path in both, bitwise; T = 9..4,096 on the
// grouped GEMMs (other kernels: not bitwise, within the bound; the CPU specification checks T <= 300);
// T = 5,000 on the prefill path over the scratch, whose values are the copies' up to the rounding of
// compressed-tensors' divided global (nvfp4_layout.h): within 1e-5. Both layers alternate (a stale
// scratch would show). Then the model: a 1,500-token prompt and 3 decode steps within the bound of the
// copies' logits; and the device bytes: the copies' minus every layer's BF16 experts plus one scratch.
TEST_F(CudaNvfp4, GroupedGemmWithoutBf16Copies) {
    const int64_t k = config_.num_experts_per_tok, H = config_.hidden_size;
    auto make_packed = [&](int scratch, int grouped) {
        cuda::CudaOptions o;
        o.poison = true;
        o.nvfp4_kernels = 1;
        o.moe_int4_scratch = scratch;
        o.moe_int4_grouped = grouped;
        auto gpu = std::make_unique<cuda::CudaOps>(o);
        gpu->prepare_weights(weight_set(*weights_));
        return gpu;
    };
    auto nocopy = make_packed(1, 1), copies = make_packed(0, 0);
    ASSERT_EQ(nocopy->weights().int4_scratch_layers(), config_.num_hidden_layers);
    ASSERT_EQ(copies->weights().int4_scratch_layers(), 0);
    for (int64_t T : {3, 9, 64, 300, 4096, 5000}) {
        for (int layer : {0, 1, 0}) {
            const MoeWeights& m = weights_->layers[size_t(layer)].moe;
            const auto x = gpu_test::random_floats(size_t(T * H), rng_);
            const std::vector<float> y = gpu_test::moe_y(*nocopy, x, T, m, k, config_.norm_topk_prob);
            const std::vector<float> y0 = gpu_test::moe_y(*copies, x, T, m, k, config_.norm_topk_prob);
            if (T <= 8) {
                EXPECT_TRUE(y == y0) << "T=" << T << " layer " << layer << ": the small-T path differs";
            } else if (T <= 4096) {
                EXPECT_NE(y, y0) << "T=" << T << " layer " << layer << ": the BF16 GEMMs' bits (grouped GEMMs not taken?)";
                EXPECT_LT(normalised_error(y, y0), kBound) << "T=" << T << " layer " << layer;
            } else {
                EXPECT_LT(normalised_error(y, y0), 1e-5) << "T=" << T << " layer " << layer << ": the scratch";
            }
            if (T >= 9 && T <= 300 && layer == 1) {
                std::vector<float> ref(x.size());
                cpu_.moe(x.data(), T, m, k, config_.norm_topk_prob, ref.data());
                EXPECT_LT(normalised_error(y, ref), kBound) << "T=" << T << ": against the CPU";
            }
        }
    }
    std::vector<int32_t> ids(1500);
    std::uniform_int_distribution<int32_t> tok(0, int32_t(config_.vocab_size) - 1);
    for (int32_t& t : ids) t = tok(rng_);
    std::vector<std::vector<float>> logits[2];
    for (int v : {0, 1}) {
        Qwen36Model model(*weights_, v == 0 ? *copies : *nocopy);
        SingleSequence seq(model, int64_t(ids.size()) + 8, KvCacheDtype::kBF16);
        logits[v].push_back(seq.feed(ids, false));
        for (int32_t t : {5, 77, 1234}) logits[v].push_back(seq.feed({t}, false));
    }
    for (size_t i = 0; i < logits[0].size(); ++i) {
        ASSERT_FALSE(logits[1][i].empty());
        EXPECT_LT(normalised_error(logits[1][i], logits[0][i]), kBound) << "step " << i;
    }
    const int64_t E = config_.num_experts, I = config_.moe_intermediate_size, Is = config_.shared_expert_intermediate_size;
    const size_t layer_bf16 = size_t(3 * H * (E * I + Is)) * 2;
    EXPECT_EQ(nocopy->weights().int4_scratch_bytes(), layer_bf16);
    EXPECT_EQ(copies->weights().device_bytes() - nocopy->weights().device_bytes(),
              size_t(config_.num_hidden_layers - 1) * layer_bf16);
}

// The packed copies cost their bytes beside the BF16 ones: 0.5625 bytes per NVFP4 weight (codes 0.5,
// E4M3 scale bytes 1/16) plus the expert tables' globals.
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
    EXPECT_EQ(int64_t(on->weights().device_bytes() - off->weights().device_bytes()), n / 16 * 9 + tables);
}

}  // namespace

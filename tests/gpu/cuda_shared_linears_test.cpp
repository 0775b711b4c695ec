// Ops::linears on the CUDA backend (Gemm::linears; issue 14 item 4; CudaOptions::
// shared_linear_input 1): the model's linears of one input (attention q/k/v, GDN in_proj
// qkv/z/b/a) in one call that quantises x once (FP8 weights, block-scaled path) or rounds it to
// bf16 once (BF16 weights, cuBLASLt path). At the real model's
// shapes, FP8 and BF16 weights, T from 1 (small-rows kernels: nothing shared) through padded
// (T % 4 != 0: the block-scaled GEMM writes a scratch) and unpadded rows to 16,383:
//  - every output bitwise equal to a separate CudaOps::linear on the same input (the call is a
//    pure restructuring: same quantisation kernel, same cached cuBLASLt plan per shape);
//  - the sharing happened where it applies (Gemm::shared_input_reuses: one fewer quantisation
//    or bf16 copy than weights on the shared path), and not where it does not (small rows);
//  - FP8 at 1-4 rows: one small-rows launch for all FP8 weights of the call (one per weight
//    for separate linears);
//  - the outputs are written at all (the arena is poisoned with NaN) and near the CPU
//    specification (CpuOps::linear; bounds of CudaOpsParity.Fp8BlockLinear / Linear: 4e-2 for
//    the activations' e4m3 rounding, 1e-2 for bf16), checked on the first rows only at large T.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "backend/cpu/cpu_ops.h"
#include "config/model_config.h"
#include "gpu_test_util.h"
#include "model/weights.h"

using namespace qs;
using gpu_test::real_shapes;
using gpu_test::normalised_error;

namespace {

struct Group {
    const char* name;
    std::vector<const LinearWeight*> ws;  // one input, every in_features equal
};

void check_format(WeightFormat format, cuda::DeviceLinear::Dtype shared_dtype) {
    const ModelConfig config = real_shapes(8);
    ModelWeights w = make_dummy_weights(config, 91, /*with_mtp=*/false, format);
    cuda::CudaOptions o;
    o.poison = true;
    o.shared_linear_input = 1;  // the default (checked below), set so the test says what it runs
    cuda::CudaOps ops(o);
    ops.prepare_weights(weight_set(w));
    const bool block_expected = cuda::Gemm::fp8_block_scaling_expected(o.device);
    const DecoderLayerWeights *attn = nullptr, *gdn = nullptr;
    for (const auto& l : w.layers) (l.type == LayerType::kFullAttention ? attn : gdn) = &l;
    ASSERT_TRUE(attn && gdn);
    const std::vector<Group> groups = {
        {"attention q/k/v", {&attn->attn.q_proj, &attn->attn.k_proj, &attn->attn.v_proj}},
        {"gdn qkv/z/b/a", {&gdn->gdn.in_proj_qkv, &gdn->gdn.in_proj_z, &gdn->gdn.in_proj_b, &gdn->gdn.in_proj_a}}};
    CpuOps cpu;
    std::mt19937 rng{4242};
    for (const int64_t T : {1, 2, 3, 4, 5, 64, 1000, 16383}) {
        for (const Group& g : groups) {
            const std::string what = std::string(g.name) + " T=" + std::to_string(T);
            const int64_t in = g.ws[0]->in_features;
            const auto x = gpu_test::random_floats(size_t(T * in), rng);
            float* dx = gpu_test::to_device(ops, x);
            // Weights on the shared path at this T: cuBLASLt's (no small-rows kernel: FP8 takes
            // it up to fp8_small_rows = 4 rows, BF16 up to 2).
            int64_t on_shared_path = 0;
            for (const LinearWeight* l : g.ws)
                if (ops.weights().linear(*l).dtype == shared_dtype) ++on_shared_path;
            const int64_t small_rows_max = shared_dtype == cuda::DeviceLinear::Dtype::kFP8Block ? 4 : 2;
            const bool shared = T > small_rows_max && (block_expected || format != WeightFormat::kFP8Block);
            ASSERT_GE(on_shared_path, 2) << what;

            std::vector<float*> together, alone;
            for (const LinearWeight* l : g.ws) {
                together.push_back(ops.alloc(T * l->out_features));
                alone.push_back(ops.alloc(T * l->out_features));
            }
            const int64_t reuses_before = ops.gemm().shared_input_reuses();
            const int64_t v2_before = ops.gemm().fp8_counts().small_rows_v2_launches;
            if (g.ws.size() == 3) {
                ops.linears(dx, T, {{*g.ws[0], together[0]}, {*g.ws[1], together[1]}, {*g.ws[2], together[2]}});
            } else {
                ops.linears(dx, T, {{*g.ws[0], together[0]}, {*g.ws[1], together[1]}, {*g.ws[2], together[2]},
                                    {*g.ws[3], together[3]}});
            }
            EXPECT_EQ(ops.gemm().shared_input_reuses() - reuses_before, shared ? on_shared_path - 1 : 0) << what;
            // FP8 at 1-4 rows: the small-rows kernel's version 2 takes all FP8 weights of the call in
            // one launch; separate linears take one launch each.
            const bool fp8_small = format == WeightFormat::kFP8Block && T <= 4;
            const int64_t v2_mid = ops.gemm().fp8_counts().small_rows_v2_launches;
            EXPECT_EQ(v2_mid - v2_before, fp8_small ? 1 : 0) << what << ": FP8 small-rows launches of linears()";
            for (size_t i = 0; i < g.ws.size(); ++i) ops.linear(dx, T, *g.ws[i], alone[i]);
            EXPECT_EQ(ops.gemm().fp8_counts().small_rows_v2_launches - v2_mid, fp8_small ? on_shared_path : 0)
                << what << ": FP8 small-rows launches of separate linears";
            EXPECT_EQ(ops.gemm().shared_input_reuses() - reuses_before, shared ? on_shared_path - 1 : 0)
                << what << ": a single linear shares nothing";

            const int64_t checked_rows = std::min<int64_t>(T, 8);
            for (size_t i = 0; i < g.ws.size(); ++i) {
                const LinearWeight& l = *g.ws[i];
                const size_t n = size_t(T * l.out_features);
                const std::vector<float> a = gpu_test::to_host(ops, together[i], n);
                const std::vector<float> b = gpu_test::to_host(ops, alone[i], n);
                EXPECT_EQ(std::memcmp(a.data(), b.data(), n * 4), 0)
                    << what << ", output " << i << ": linears differs from a separate linear";
                std::vector<float> ref(size_t(checked_rows * l.out_features));
                cpu.linear(x.data(), checked_rows, l, ref.data());
                const std::vector<float> head(a.begin(), a.begin() + int64_t(ref.size()));
                const bool fp8 = ops.weights().linear(l).dtype == cuda::DeviceLinear::Dtype::kFP8Block;
                const double bound = fp8 ? 4e-2 : 1e-2;
                EXPECT_LT(normalised_error(head, ref), bound) << what << ", output " << i << " against the CPU";
            }
            ops.free_all();
        }
    }
}

TEST(CudaSharedLinears, Fp8BitwiseEqualToSeparateLinears) {
    QS_REQUIRE_GPU();
    check_format(WeightFormat::kFP8Block, cuda::DeviceLinear::Dtype::kFP8Block);
}

TEST(CudaSharedLinears, Bf16BitwiseEqualToSeparateLinears) {
    QS_REQUIRE_GPU();
    check_format(WeightFormat::kDense, cuda::DeviceLinear::Dtype::kBF16);
}

// CudaOptions::shared_linear_input 0: linears() is one linear per output, nothing shared. The
// default is 1 since the H200 run.
TEST(CudaSharedLinears, OptionOffSharesNothing) {
    QS_REQUIRE_GPU();
    ModelWeights w = make_dummy_weights(real_shapes(8), 92, /*with_mtp=*/false, WeightFormat::kFP8Block);
    cuda::CudaOptions o;
    EXPECT_EQ(o.shared_linear_input, 1);
    o.shared_linear_input = 0;
    cuda::CudaOps ops(o);
    ops.prepare_weights(weight_set(w));
    const DecoderLayerWeights* attn = nullptr;
    for (const auto& l : w.layers)
        if (l.type == LayerType::kFullAttention) attn = &l;
    ASSERT_TRUE(attn);
    const int64_t T = 64, in = attn->attn.q_proj.in_features;
    std::mt19937 rng{7};
    float* dx = gpu_test::to_device(ops, gpu_test::random_floats(size_t(T * in), rng));
    float* q = ops.alloc(T * attn->attn.q_proj.out_features);
    float* k = ops.alloc(T * attn->attn.k_proj.out_features);
    float* v = ops.alloc(T * attn->attn.v_proj.out_features);
    const int64_t block_before = ops.gemm().fp8_counts().block_scaled + ops.gemm().fp8_counts().dequant;
    ops.linears(dx, T, {{attn->attn.q_proj, q}, {attn->attn.k_proj, k}, {attn->attn.v_proj, v}});
    EXPECT_EQ(ops.gemm().fp8_counts().block_scaled + ops.gemm().fp8_counts().dequant, block_before + 3);
    EXPECT_EQ(ops.gemm().shared_input_reuses(), 0);
}

}  // namespace

// A layer's norms inside the FP8 small-rows launches (issue 15 item 2), at the real model's shapes
// with FP8 weights: the input norm in the projections' launch (CudaOptions::fused_input_norm;
// Ops::rms_norm_linears) and the post-attention norm in the o_proj / out_proj launch's last block
// (CudaOptions::fused_output_norm; Ops::linear_add2_rms_norm_zc):
//  - h and every output of rms_norm_linears bitwise equal with the option at 0 (the norm kernel,
//    then the linears), 4 and 2 rows, with and without the pending addend, for T = 1..4 (the norm
//    rides on the launch up to the option's rows: CudaOps::fused_input_norms counts it) and T = 5,
//    64 (it cannot: the norm kernel runs, nothing counted); x and pending unchanged; h near the CPU
//    specification;
//  - linear_add2_rms_norm_zc's y, x and h bitwise equal with fused_output_norm at 0, 4 and 2 rows,
//    twice in a row (the launch counter is back at 0), counted where the norm rode on the launch;
//  - add2_rms_norm_zc bitwise equal to add then add_rms_norm_zc, in place as the final norm too;
//  - a whole model (4 real-shape layers, FP8 dummy weights) gives the same logits bit for bit with
//    both options off, at 4 rows and at their defaults over a prompt and single-row decode steps
//    (graphs on).
// Each with the FP8 small-rows kernel's version 2, version 3, and version 3 with its grid capped at
// 3 blocks per SM (CudaOptions::fp8_small_version, fp8_small_v3_blocks_per_sm; version 3's launches
// counted where the norms ride on them): both versions run the same norm code, so within a version
// the bits do not depend on where the norm runs.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "backend/cpu/cpu_ops.h"
#include "config/model_config.h"
#include "gpu_test_util.h"
#include "norm_linears_run.h"
#include "model/qwen36.h"
#include "model/single_sequence.h"
#include "model/weights.h"

using namespace qs;
using gpu_test::normalised_error;
using gpu_test::real_shapes;

namespace {

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * 4) == 0;
}

// The small-rows kernel: its version and version 3's grid cap.
struct SmallRows {
    int version;
    int v3_blocks_per_sm;
    std::string name() const {
        return "small-rows version " + std::to_string(version) + ", v3 blocks per SM " + std::to_string(v3_blocks_per_sm);
    }
    void set(cuda::CudaOptions& o) const {
        o.fp8_small_version = version;
        o.fp8_small_v3_blocks_per_sm = v3_blocks_per_sm;
    }
};
const SmallRows kSmallRows[] = {{2, 0}, {3, 0}, {3, 3}};

// Norms fused at up to `in` / `out` rows (0: never), on the small-rows kernel `k`.
cuda::CudaOptions options(int in, int out, const SmallRows& k) {
    cuda::CudaOptions o;
    o.poison = true;
    k.set(o);
    o.fused_input_norm = in;
    o.fused_output_norm = out;
    return o;
}

}  // namespace

TEST(CudaFusedInputNorm, SameBitsAsTheNormKernelThenLinears) {
    QS_REQUIRE_GPU();
    ModelWeights w = make_dummy_weights(real_shapes(8), 93, /*with_mtp=*/false, WeightFormat::kFP8Block);
    for (const SmallRows& k : kSmallRows) {
    SCOPED_TRACE(k.name());
    // on: fused at 1-4 rows; two: at 1-2 rows only (the norm kernel above).
    cuda::CudaOps off(options(0, 0, k)), on(options(4, 0, k)), two(options(2, 0, k));
    off.prepare_weights(weight_set(w));
    on.prepare_weights(weight_set(w));
    two.prepare_weights(weight_set(w));
    const std::vector<gpu_test::NormLinearsGroup> groups = gpu_test::input_norm_groups(w);
    ASSERT_EQ(groups.size(), 2u);
    const int64_t H = w.config.hidden_size;
    const double eps = w.config.rms_norm_eps;
    CpuOps cpu;
    std::mt19937 rng{515};
    for (const int64_t T : {1, 2, 3, 4, 5, 64}) {
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
                const int64_t fused_before = on.fused_input_norms(), two_before = two.fused_input_norms();
                const int64_t v3_before = on.gemm().fp8_counts().small_rows_v3_launches;
                const gpu_test::NormLinearsRun a = run(off), b = run(on), c = run(two);
                EXPECT_EQ(on.fused_input_norms() - fused_before, T <= 4 ? 1 : 0) << what;
                // Version 3 takes the FP8 launch (the GDN qkv/z: one; q/k/v: one) with the norm or without.
                EXPECT_EQ(on.gemm().fp8_counts().small_rows_v3_launches - v3_before, k.version == 3 && T <= 4 ? 1 : 0)
                    << what;
                EXPECT_EQ(two.fused_input_norms() - two_before, T <= 2 ? 1 : 0) << what;
                EXPECT_EQ(off.fused_input_norms(), 0) << what;
                EXPECT_TRUE(same_bits(a.h, b.h)) << what << ": h differs";
                EXPECT_TRUE(same_bits(a.h, c.h)) << what << ": h differs (fused at 1-2 rows)";
                for (size_t i = 0; i < g.ws.size(); ++i) {
                    EXPECT_TRUE(same_bits(a.ys[i], b.ys[i])) << what << ": output " << i << " differs";
                    EXPECT_TRUE(same_bits(a.ys[i], c.ys[i])) << what << ": output " << i << " differs (1-2 rows)";
                }
                EXPECT_TRUE(same_bits(b.x, x)) << what << ": x was written";
                if (with_pending) {
                    EXPECT_TRUE(same_bits(b.pending, pending)) << what << ": pending was written";
                }
                // h against the CPU specification (fp32 sums in another order, rsqrt rounding).
                std::vector<float> h_cpu(size_t(T * H)), sum = x;
                if (with_pending)
                    for (size_t i = 0; i < sum.size(); ++i) sum[i] += pending[i];
                cpu.rms_norm_zc(sum.data(), *g.norm, T, H, eps, h_cpu.data());
                EXPECT_LT(normalised_error(b.h, h_cpu), 1e-5) << what << ": h against the CPU";
            }
        }
    }
    }
}

TEST(CudaFusedInputNorm, OutputNormSameBitsAsTheLinearThenTheNormKernel) {
    QS_REQUIRE_GPU();
    ModelWeights w = make_dummy_weights(real_shapes(8), 96, /*with_mtp=*/false, WeightFormat::kFP8Block);
    for (const SmallRows& k : kSmallRows) {
    SCOPED_TRACE(k.name());
    cuda::CudaOps off(options(0, 0, k)), on(options(0, 4, k)), two(options(0, 2, k));
    off.prepare_weights(weight_set(w));
    on.prepare_weights(weight_set(w));
    two.prepare_weights(weight_set(w));
    const int64_t H = w.config.hidden_size;
    const double eps = w.config.rms_norm_eps;
    std::mt19937 rng{517};
    for (const DecoderLayerWeights& l : w.layers) {
        const bool attention = l.type == LayerType::kFullAttention;
        const LinearWeight& W = attention ? l.attn.o_proj : l.gdn.out_proj;
        ASSERT_EQ(W.out_features, H);
        for (const int64_t T : {1, 2, 3, 4, 5, 64}) {
            for (const bool with_pending : {false, true}) {
                const std::string what = std::string(attention ? "o_proj" : "out_proj") + " T=" + std::to_string(T) +
                                         (with_pending ? " with pending" : "");
                const auto a = gpu_test::random_floats(size_t(T * W.in_features), rng);
                const auto x = gpu_test::random_floats(size_t(T * H), rng, 3.0f);
                const auto pending = gpu_test::random_floats(size_t(T * H), rng);
                struct Run {
                    std::vector<float> y, x, h;
                };
                auto run = [&](cuda::CudaOps& ops) {
                    std::vector<Run> runs;
                    for (int rep = 0; rep < 2; ++rep) {  // twice: the counter must be back at 0
                        float* da = gpu_test::to_device(ops, a);
                        float* dx = gpu_test::to_device(ops, x);
                        float* dp = with_pending ? gpu_test::to_device(ops, pending) : nullptr;
                        float* y = ops.alloc(T * H);
                        float* h = ops.alloc(T * H);
                        ops.linear_add2_rms_norm_zc(da, T, W, y, dx, dp, l.post_attention_layernorm, eps, h);
                        runs.push_back({gpu_test::to_host(ops, y, size_t(T * H)), gpu_test::to_host(ops, dx, size_t(T * H)),
                                        gpu_test::to_host(ops, h, size_t(T * H))});
                        ops.free_all();
                    }
                    return runs;
                };
                const int64_t before = on.fused_output_norms(), two_before = two.fused_output_norms();
                const int64_t v3_before = on.gemm().fp8_counts().small_rows_v3_launches;
                const std::vector<Run> ra = run(off), rb = run(on), rc = run(two);
                EXPECT_EQ(on.fused_output_norms() - before, T <= 4 ? 2 : 0) << what;
                EXPECT_EQ(on.gemm().fp8_counts().small_rows_v3_launches - v3_before, k.version == 3 && T <= 4 ? 2 : 0)
                    << what;
                EXPECT_EQ(two.fused_output_norms() - two_before, T <= 2 ? 2 : 0) << what;
                EXPECT_EQ(off.fused_output_norms(), 0) << what;
                for (int rep = 0; rep < 2; ++rep) {
                    for (const std::vector<Run>* r : {&rb, &rc}) {
                        const Run& o = (*r)[size_t(rep)];
                        const std::string at = what + " rep " + std::to_string(rep) + (r == &rc ? " (1-2 rows)" : "");
                        EXPECT_TRUE(same_bits(ra[size_t(rep)].y, o.y)) << at << ": y differs";
                        EXPECT_TRUE(same_bits(ra[size_t(rep)].x, o.x)) << at << ": x differs";
                        EXPECT_TRUE(same_bits(ra[size_t(rep)].h, o.h)) << at << ": h differs";
                    }
                }
                EXPECT_FALSE(same_bits(rb[0].x, x)) << what << ": x was not updated";
            }
        }
    }
    }
}

TEST(CudaFusedInputNorm, Add2IsAddThenAddRmsNorm) {
    QS_REQUIRE_GPU();
    ModelWeights w = make_dummy_weights(real_shapes(8), 94, /*with_mtp=*/false, WeightFormat::kFP8Block);
    cuda::CudaOps ops(options(0, 0, SmallRows{2, 0}));
    ops.prepare_weights(weight_set(w));
    const ParamVector& norm = w.layers[0].post_attention_layernorm;
    const int64_t H = w.config.hidden_size;
    std::mt19937 rng{516};
    for (const int64_t T : {1, 3, 77}) {
        for (const bool in_place : {false, true}) {
            const std::string what = "T=" + std::to_string(T) + (in_place ? " in place" : "");
            const auto x = gpu_test::random_floats(size_t(T * H), rng, 2.0f);
            const auto y1 = gpu_test::random_floats(size_t(T * H), rng);
            const auto y2 = gpu_test::random_floats(size_t(T * H), rng, 0.5f);
            float* xa = gpu_test::to_device(ops, x);
            float* xb = gpu_test::to_device(ops, x);
            float* d1 = gpu_test::to_device(ops, y1);
            float* d2 = gpu_test::to_device(ops, y2);
            float* oa = in_place ? xa : ops.alloc(T * H);
            float* ob = in_place ? xb : ops.alloc(T * H);
            ops.add2_rms_norm_zc(xa, d1, d2, norm, T, H, w.config.rms_norm_eps, oa);
            ops.add(xb, d1, T * H);
            ops.add_rms_norm_zc(xb, d2, norm, T, H, w.config.rms_norm_eps, ob);
            EXPECT_TRUE(same_bits(gpu_test::to_host(ops, oa, size_t(T * H)), gpu_test::to_host(ops, ob, size_t(T * H))))
                << what << ": normalised rows differ";
            if (!in_place) {
                EXPECT_TRUE(same_bits(gpu_test::to_host(ops, xa, size_t(T * H)), gpu_test::to_host(ops, xb, size_t(T * H))))
                    << what << ": residual sums differ";
            }
            ops.free_all();
        }
    }
}

TEST(CudaFusedInputNorm, ModelLogitsSameBits) {
    QS_REQUIRE_GPU();
    ModelWeights w = make_dummy_weights(real_shapes(8), 95, /*with_mtp=*/false, WeightFormat::kFP8Block);
    auto logits_of = [&](const cuda::CudaOptions& o, int64_t fused_count[2]) {
        cuda::CudaOps ops(o);
        ops.prepare_weights(weight_set(w));
        Qwen36Model model(w, ops);
        SingleSequence seq(model, 32, KvCacheDtype::kFP8E4M3);
        std::vector<float> all = seq.feed({11, 22, 33, 44, 55}, false);
        for (int32_t id : {66, 77, 88, 99}) {
            const std::vector<float> step = seq.feed({id}, false);
            all.insert(all.end(), step.begin(), step.end());
        }
        fused_count[0] = ops.fused_input_norms();
        fused_count[1] = ops.fused_output_norms();
        return all;
    };
    for (const SmallRows& k : kSmallRows) {
        SCOPED_TRACE(k.name());
        int64_t fused_off[2] = {-1, -1}, fused_on[2] = {-1, -1}, fused_default[2] = {-1, -1};  // input, output norms
        cuda::CudaOptions off, on, defaults;
        off.fused_input_norm = off.fused_output_norm = 0;
        on.fused_input_norm = on.fused_output_norm = 4;
        for (cuda::CudaOptions* o : {&off, &on, &defaults}) k.set(*o);
        const std::vector<float> a = logits_of(off, fused_off), b = logits_of(on, fused_on),
                                 c = logits_of(defaults, fused_default);
        ASSERT_FALSE(a.empty());
        EXPECT_EQ(fused_off[0], 0);
        EXPECT_EQ(fused_off[1], 0);
        // The decode steps' four layers, each input norm and post-attention norm on a launch: counted
        // when the one-row graph is captured (replays do not call the ops), so at least 4 of each; the
        // defaults fuse the post-attention norm at one row, the input norm nowhere (fused_input_norm 0).
        EXPECT_GE(fused_on[0], 4);
        EXPECT_GE(fused_on[1], 4);
        EXPECT_EQ(fused_default[0], 0);
        EXPECT_GE(fused_default[1], 4);
        EXPECT_TRUE(same_bits(a, b)) << "logits differ with the norms fused";
        EXPECT_TRUE(same_bits(a, c)) << "logits differ with the default options";
    }
}

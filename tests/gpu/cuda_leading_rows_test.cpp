// CudaOps::linear_leading_rows (MTP drafts over --speculative-draft-vocab): the first `rows`
// outputs of a linear's device copy, at the real model's shapes: the bf16 lm_head [248,320, 2,048]
// with 32,768 rows and with a count that is not a multiple of 128, and the widest FP8-block linear
// of a layer with half its rows plus one.
//  - T = 1, 2 (the small-rows kernels: each output its own dot product, whatever the row count):
//    bitwise the whole linear's first columns;
//  - T = 5, 64 (cuBLASLt; another N may take another algorithm): within the bounds of the whole
//    linear against the CPU specification, CpuOps::linear_leading_rows (4e-2 for the FP8 path's
//    e4m3 activations, 1e-2 for bf16);
//  - the outputs are written at all (the arena is poisoned with NaN).
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "backend/cpu/cpu_ops.h"
#include "config/model_config.h"
#include "gpu_test_util.h"
#include "model/weights.h"

using namespace qs;
using gpu_test::normalised_error;
using gpu_test::real_shapes;

namespace {

void check_leading_rows(WeightFormat format) {
    const ModelConfig config = real_shapes(8);
    ModelWeights w = make_dummy_weights(config, 17, /*with_mtp=*/false, format);
    cuda::CudaOptions o;
    o.poison = true;
    cuda::CudaOps ops(o);
    ops.prepare_weights(weight_set(w));
    const LinearWeight* widest = nullptr;
    for (const auto& l : w.layers)
        for (const LinearWeight* x : {&l.gdn.in_proj_qkv, &l.attn.q_proj})
            if (x->out_features > 0 && (!widest || x->out_features > widest->out_features)) widest = x;
    ASSERT_TRUE(widest);
    struct Case {
        const LinearWeight* w;
        int64_t rows;
    };
    const std::vector<Case> cases = {
        {&w.lm_head, 32768}, {&w.lm_head, 1000}, {widest, widest->out_features / 2 + 1}};
    CpuOps cpu;
    std::mt19937 rng{99};
    for (const Case& c : cases) {
        const LinearWeight& l = *c.w;
        ASSERT_TRUE(leading_rows_supported(l));
        const bool fp8 = ops.weights().linear(l).dtype == cuda::DeviceLinear::Dtype::kFP8Block;
        for (const int64_t T : {1, 2, 5, 64}) {
            const std::string what = std::string(weight_format_name(l.format)) + " [" +
                                     std::to_string(l.out_features) + "] rows " + std::to_string(c.rows) +
                                     " T=" + std::to_string(T);
            const auto x = gpu_test::random_floats(size_t(T * l.in_features), rng);
            float* dx = gpu_test::to_device(ops, x);
            float* lead = ops.alloc(T * c.rows);
            float* whole = ops.alloc(T * l.out_features);
            ops.linear_leading_rows(dx, T, l, c.rows, lead);
            ops.linear(dx, T, l, whole);
            const std::vector<float> got = gpu_test::to_host(ops, lead, size_t(T * c.rows));
            const std::vector<float> all = gpu_test::to_host(ops, whole, size_t(T * l.out_features));
            std::vector<float> first(size_t(T * c.rows));
            for (int64_t t = 0; t < T; ++t)
                std::memcpy(first.data() + t * c.rows, all.data() + t * l.out_features, size_t(c.rows) * 4);
            if (T <= 2) {
                EXPECT_EQ(std::memcmp(got.data(), first.data(), got.size() * 4), 0)
                    << what << ": the small-rows kernels' outputs must not depend on the row count";
            }
            std::vector<float> ref(size_t(T * c.rows));
            cpu.linear_leading_rows(x.data(), T, l, c.rows, ref.data());
            EXPECT_LT(normalised_error(got, ref), fp8 ? 4e-2 : 1e-2) << what << " against the CPU";
            ops.free_all();
        }
    }
}

}  // namespace

TEST(CudaLeadingRows, Bf16FirstRowsOfTheWholeLinear) {
    QS_REQUIRE_GPU();
    check_leading_rows(WeightFormat::kDense);
}

TEST(CudaLeadingRows, Fp8BlockFirstRowsOfTheWholeLinear) {
    QS_REQUIRE_GPU();
    check_leading_rows(WeightFormat::kFP8Block);
}

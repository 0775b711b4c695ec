// launch_copy3 (backend/cuda/basic_kernels.h): three whole copies in one launch, as the whole-batch
// GDN stash takes them. Each output must equal its source exactly, over part sizes around its
// 16 KB block boundaries and a part of n = 0, and nothing past an output's end may be written;
// unaligned parts or n % 4 != 0 are refused by copy3_supported.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "backend/cuda/basic_kernels.h"
#include "backend/cuda/cuda_check.h"
#include "gpu_test_util.h"

namespace qs::cuda {
namespace {

constexpr int64_t kGuard = 64;  // floats after each output that must stay untouched

struct DeviceFloats {
    float* p = nullptr;
    explicit DeviceFloats(int64_t n) { QS_CUDA_CHECK(cudaMalloc(&p, size_t(n > 0 ? n : 1) * sizeof(float))); }
    ~DeviceFloats() { cudaFree(p); }
};

TEST(CudaCopy3, EachOutputEqualsItsSourceAndNothingPastItIsWritten) {
    QS_REQUIRE_GPU();
    std::mt19937 rng(7);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    // (qkv, b, a) of T = 2 at the real shape; around one block (4,096 floats); several blocks; an empty part.
    const std::vector<std::array<int64_t, 3>> cases = {
        {2 * 8192, 2 * 32, 2 * 32}, {4096, 4092, 4100}, {1024 * 8192, 0, 1024 * 32}, {0, 0, 4}};
    for (const auto& ns : cases) {
        std::vector<std::vector<float>> src(3), out_init(3);
        std::vector<std::unique_ptr<DeviceFloats>> dsrc, dout;
        GatherRowsPart parts[3];
        for (int i = 0; i < 3; ++i) {
            src[i].resize(size_t(ns[i]));
            for (float& v : src[i]) v = u(rng);
            out_init[i].assign(size_t(ns[i] + kGuard), -7.0f);
            dsrc.push_back(std::make_unique<DeviceFloats>(ns[i]));
            dout.push_back(std::make_unique<DeviceFloats>(ns[i] + kGuard));
            if (ns[i] > 0)
                QS_CUDA_CHECK(cudaMemcpy(dsrc[i]->p, src[i].data(), size_t(ns[i]) * 4, cudaMemcpyHostToDevice));
            QS_CUDA_CHECK(cudaMemcpy(dout[i]->p, out_init[i].data(), out_init[i].size() * 4, cudaMemcpyHostToDevice));
            parts[i] = GatherRowsPart{dsrc[i]->p, ns[i], dout[i]->p};
        }
        ASSERT_TRUE(copy3_supported(parts));
        launch_copy3(parts, nullptr);
        QS_CUDA_CHECK(cudaDeviceSynchronize());
        for (int i = 0; i < 3; ++i) {
            std::vector<float> got(out_init[i].size());
            QS_CUDA_CHECK(cudaMemcpy(got.data(), dout[i]->p, got.size() * 4, cudaMemcpyDeviceToHost));
            const std::string what = "part " + std::to_string(i) + " of n = " + std::to_string(ns[i]);
            EXPECT_TRUE(std::equal(src[i].begin(), src[i].end(), got.begin())) << what;
            for (int64_t g = 0; g < kGuard; ++g) ASSERT_EQ(got[size_t(ns[i] + g)], -7.0f) << what << ", guard " << g;
        }
    }
}

TEST(CudaCopy3, RefusesUnalignedPartsAndLengthsNotAMultipleOfFour) {
    QS_REQUIRE_GPU();
    DeviceFloats a(64), b(64);
    const GatherRowsPart ok[3] = {{a.p, 8, b.p}, {}, {}};
    EXPECT_TRUE(copy3_supported(ok));
    const GatherRowsPart odd[3] = {{a.p, 6, b.p}, {}, {}};
    EXPECT_FALSE(copy3_supported(odd));
    const GatherRowsPart shifted[3] = {{a.p + 1, 8, b.p}, {}, {}};
    EXPECT_FALSE(copy3_supported(shifted));
}

}  // namespace
}  // namespace qs::cuda

// The NCCL collective (backend/cuda/nccl_collective.h) over every GPU this process sees — one
// rank per GPU, one thread per rank, as a tensor-parallel group runs them; on a one-GPU machine a
// one-rank communicator, which still runs NCCL's all-reduce and all-gather: sums and gathers equal
// the host's, the gather laid out [rows, ranks · cols] with rank 0's columns first. Built where
// nccl.h was found (CMake says when it was not); libnccl.so.2 must be loadable at run time
// (QS_NCCL_LIBRARY or LD_LIBRARY_PATH): a missing library is a failure, not a skip.
#ifdef QS_HAVE_NCCL
#include <gtest/gtest.h>

#include <thread>

#include "backend/cuda/nccl_collective.h"
#include "gpu_test_util.h"

using namespace qs;

namespace {

// Rank r's values: x[i] = (r + 1) · (i % 97) / 8 + r (exact in fp32, so sums are exact).
std::vector<float> rank_values(int r, int64_t n) {
    std::vector<float> v(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) v[size_t(i)] = float(r + 1) * float(i % 97) / 8.0f + float(r);
    return v;
}

}  // namespace

TEST(NcclCollective, AllReduceAndGatherOverEveryVisibleGpu) {
    QS_REQUIRE_GPU();
    int devices = 0;
    QS_CUDA_CHECK(cudaGetDeviceCount(&devices));
    auto group = cuda::NcclGroup::create(devices);
    ASSERT_TRUE(group.is_ok()) << group.status().message();
    std::printf("NCCL %d, %d ranks (one per visible GPU)\n", (*group)->version(), devices);
    const int size = devices;
    const int64_t n = 100003;                 // odd: no alignment luck
    const int64_t rows = 3, cols = 4096 / 2;  // a [3, vocab / 2] logits block per rank
    std::vector<std::vector<float>> sums(static_cast<size_t>(size)), gathered(static_cast<size_t>(size)),
        gathered_row(static_cast<size_t>(size));
    std::vector<std::thread> ranks;
    for (int r = 0; r < size; ++r)
        ranks.emplace_back([&, r] {
            QS_CUDA_CHECK(cudaSetDevice(r));
            cudaStream_t stream;
            QS_CUDA_CHECK(cudaStreamCreate(&stream));
            Collective& c = (*group)->rank(r, stream);
            EXPECT_EQ(c.rank(), r);
            EXPECT_EQ(c.size(), size);
            float *x, *local, *out;
            QS_CUDA_CHECK(cudaMalloc(&x, size_t(n) * sizeof(float)));
            QS_CUDA_CHECK(cudaMalloc(&local, size_t(rows * cols) * sizeof(float)));
            QS_CUDA_CHECK(cudaMalloc(&out, size_t(rows * cols * size) * sizeof(float)));
            const std::vector<float> xv = rank_values(r, n), lv = rank_values(100 * r, rows * cols);
            QS_CUDA_CHECK(cudaMemcpy(x, xv.data(), xv.size() * sizeof(float), cudaMemcpyHostToDevice));
            QS_CUDA_CHECK(cudaMemcpy(local, lv.data(), lv.size() * sizeof(float), cudaMemcpyHostToDevice));
            c.all_reduce_sum(x, n);
            c.all_gather_columns(local, rows, cols, out);
            QS_CUDA_CHECK(cudaStreamSynchronize(stream));
            sums[size_t(r)].resize(size_t(n));
            gathered[size_t(r)].resize(size_t(rows * cols * size));
            QS_CUDA_CHECK(cudaMemcpy(sums[size_t(r)].data(), x, size_t(n) * sizeof(float), cudaMemcpyDeviceToHost));
            QS_CUDA_CHECK(cudaMemcpy(gathered[size_t(r)].data(), out, gathered[size_t(r)].size() * sizeof(float),
                                     cudaMemcpyDeviceToHost));
            // One row: the gather's own layout (no strided copies).
            c.all_gather_columns(local, 1, cols, out);
            QS_CUDA_CHECK(cudaStreamSynchronize(stream));
            gathered_row[size_t(r)].resize(size_t(cols * size));
            QS_CUDA_CHECK(cudaMemcpy(gathered_row[size_t(r)].data(), out, gathered_row[size_t(r)].size() * sizeof(float),
                                     cudaMemcpyDeviceToHost));
            QS_CUDA_CHECK(cudaFree(x));
            QS_CUDA_CHECK(cudaFree(local));
            QS_CUDA_CHECK(cudaFree(out));
            QS_CUDA_CHECK(cudaStreamDestroy(stream));
        });
    for (std::thread& t : ranks) t.join();
    std::vector<float> want_sum(static_cast<size_t>(n), 0.0f);
    for (int r = 0; r < size; ++r) {
        const std::vector<float> v = rank_values(r, n);
        for (int64_t i = 0; i < n; ++i) want_sum[size_t(i)] += v[size_t(i)];
    }
    std::vector<float> want_gather(size_t(rows * cols * size)), want_row(size_t(cols * size));
    for (int r = 0; r < size; ++r) {
        const std::vector<float> v = rank_values(100 * r, rows * cols);
        for (int64_t i = 0; i < rows; ++i)
            for (int64_t j = 0; j < cols; ++j)
                want_gather[size_t(i * cols * size + r * cols + j)] = v[size_t(i * cols + j)];
        for (int64_t j = 0; j < cols; ++j) want_row[size_t(r * cols + j)] = v[size_t(j)];
    }
    for (int r = 0; r < size; ++r) {
        EXPECT_EQ(sums[size_t(r)], want_sum) << "rank " << r;
        EXPECT_EQ(gathered[size_t(r)], want_gather) << "rank " << r;
        EXPECT_EQ(gathered_row[size_t(r)], want_row) << "rank " << r;
    }
}

TEST(NcclCollective, MoreRanksThanGpusIsAnErrorNamingTheCount) {
    QS_REQUIRE_GPU();
    int devices = 0;
    QS_CUDA_CHECK(cudaGetDeviceCount(&devices));
    auto group = cuda::NcclGroup::create(devices + 1);
    ASSERT_FALSE(group.is_ok());
    EXPECT_NE(group.status().message().find(std::to_string(devices) + " visible"), std::string::npos)
        << group.status().message();
}
#endif  // QS_HAVE_NCCL

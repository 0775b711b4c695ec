// DeviceArena (backend/cuda/device_memory.h): a block larger than the chunk size gets a chunk of
// the block plus a quarter, so the next step's slightly larger block (a serving step's blocks
// vary with its token count) fits the same chunk instead of taking another one.
#include <gtest/gtest.h>

#include "backend/cuda/device_memory.h"
#include "gpu_test_util.h"

namespace qs::cuda {
namespace {

constexpr size_t kMiB = size_t(1) << 20;

TEST(CudaArena, ALargeBlockGetsAChunkWithHeadroom) {
    QS_REQUIRE_GPU();
    DeviceArena a(kMiB);
    a.allocate(kMiB / 2);  // the first chunk, of the chunk size
    EXPECT_EQ(a.reserved(), kMiB);
    a.allocate(4 * kMiB);  // a chunk of 5 MiB
    EXPECT_EQ(a.reserved(), kMiB + 5 * kMiB);
    a.reset();
    // The next step: the same small block, a slightly larger large one: no growth.
    a.allocate(kMiB / 2);
    char* p = static_cast<char*>(a.allocate(4 * kMiB + kMiB / 2));
    EXPECT_EQ(a.reserved(), 6 * kMiB);
    // The headroom left in that chunk still serves small blocks after it, as a stack.
    char* q = static_cast<char*>(a.allocate(kMiB / 4));
    EXPECT_EQ(q - p, std::ptrdiff_t(4 * kMiB + kMiB / 2));
    EXPECT_EQ(a.reserved(), 6 * kMiB);
    // Past the headroom, a new chunk.
    a.reset();
    a.allocate(kMiB / 2);
    a.allocate(5 * kMiB + kMiB / 2);
    EXPECT_GT(a.reserved(), 6 * kMiB);
}

TEST(CudaArena, SmallBlocksShareChunksOfTheChunkSize) {
    QS_REQUIRE_GPU();
    DeviceArena a(kMiB);
    for (int i = 0; i < 8; ++i) a.allocate(kMiB / 4);
    EXPECT_EQ(a.reserved(), 2 * kMiB);
    EXPECT_EQ(a.high_water(), 2 * kMiB);
}

}  // namespace
}  // namespace qs::cuda

// DeviceArena (backend/cuda/device_memory.h): blocks larger than the chunk size get chunks of
// their own size and the stack only moves forward, so a step that allocates one extra small block
// before the warm-up's sequence can miss every chunk; consolidate() turns the arena into one chunk
// of its high water plus an eighth, which any step with no higher peak fits.
#include <gtest/gtest.h>

#include "backend/cuda/device_memory.h"
#include "gpu_test_util.h"

namespace qs::cuda {
namespace {

constexpr size_t kMiB = size_t(1) << 20;

// The warm-up's blocks, then a step with one extra small block in front and the same big ones.
void warm_up(DeviceArena& a) {
    a.allocate(kMiB / 2);
    a.allocate(2 * kMiB);
    a.allocate(3 * kMiB);
    a.reset();
}

void shifted_step(DeviceArena& a) {
    a.allocate(kMiB / 2);
    a.allocate(kMiB / 2 + kMiB / 4);  // the extra block: chunk 0 has no room, so it takes chunk 1
    a.allocate(2 * kMiB);             // chunk 1 has 1.25 MiB left: it takes the 3 MiB chunk
    a.allocate(3 * kMiB);             // nothing left that fits: a new chunk
    a.reset();
}

TEST(CudaArena, WithoutConsolidationAShiftedStepGrowsTheArena) {
    QS_REQUIRE_GPU();
    DeviceArena a(kMiB);
    warm_up(a);
    const size_t before = a.reserved();
    EXPECT_EQ(before, kMiB + 2 * kMiB + 3 * kMiB);
    shifted_step(a);
    EXPECT_EQ(a.reserved(), before + 3 * kMiB);  // the failure consolidation exists for
}

TEST(CudaArena, ConsolidatedArenaFitsAShiftedStep) {
    QS_REQUIRE_GPU();
    DeviceArena a(kMiB);
    warm_up(a);
    const size_t high = a.high_water();
    EXPECT_EQ(high, kMiB / 2 + 2 * kMiB + 3 * kMiB);
    a.consolidate();
    // One chunk: the high water plus an eighth, rounded up to whole chunks.
    const size_t want = (high + high / 8 + kMiB - 1) / kMiB * kMiB;
    EXPECT_EQ(a.reserved(), want);
    shifted_step(a);
    EXPECT_EQ(a.reserved(), want);
    // Blocks are still distinct and inside the one chunk.
    char* p = static_cast<char*>(a.allocate(kMiB));
    char* q = static_cast<char*>(a.allocate(kMiB));
    EXPECT_EQ(q - p, std::ptrdiff_t(kMiB));
    a.reset();
    // A peak above the chunk still grows it (nothing is refused).
    a.allocate(want + kMiB);
    EXPECT_GT(a.reserved(), want);
}

TEST(CudaArena, ConsolidateRefusesWhileBlocksAreInUse) {
    QS_REQUIRE_GPU();
    DeviceArena a(kMiB);
    a.allocate(2 * kMiB);
    a.allocate(2 * kMiB);
    EXPECT_DEATH(a.consolidate(), "still in use");
}

}  // namespace
}  // namespace qs::cuda

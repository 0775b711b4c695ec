// The vision tower's device memory arithmetic (backend/vision_memory.h), which the CUDA runner
// reserves before the KV cache is sized (Ops::reserve_vision_tower): the weights' bytes against an
// independent parameter count, the arena of one forward at the release widths against the
// buffers listed by hand from VisionRunner::forward, and the largest image's patch rows.
// CudaVisionTower.ReserveHoldsEveryForward (tests/gpu) checks on the device that a forward after
// the reservation takes nothing more.
#include <gtest/gtest.h>

#include "backend/vision_memory.h"

using namespace qs;

namespace {

VisionLinear linear(int in, int out) {
    VisionLinear l;
    l.in = in;
    l.out = out;
    l.w.assign(size_t(in) * size_t(out), 0.0f);
    l.b.assign(size_t(out), 0.0f);
    return l;
}

VisionNorm norm(int n) { return VisionNorm{std::vector<float>(size_t(n)), std::vector<float>(size_t(n))}; }

// A small tower (hidden 64, 4 heads, intermediate 96, patch 4, 2 blocks, out 48).
VisionWeights small_tower() {
    VisionWeights w;
    VisionDims& d = w.dims;
    d.hidden = 64;
    d.heads = 4;
    d.intermediate = 96;
    d.patch_dim = 3 * 2 * 4 * 4;
    d.pos_side = 4;
    d.merge = 2;
    d.out_hidden = 48;
    w.patch_embed = linear(d.patch_dim, d.hidden);
    w.pos_embed.assign(size_t(d.pos_side * d.pos_side * d.hidden), 0.0f);
    for (int i = 0; i < 2; ++i)
        w.blocks.push_back(VisionBlockWeights{norm(64), norm(64), linear(64, 192), linear(64, 64), linear(64, 96),
                                              linear(96, 64)});
    w.merger_norm = norm(64);
    w.merger_fc1 = linear(256, 256);
    w.merger_fc2 = linear(256, 48);
    return w;
}

VisionDims release_dims() {
    VisionDims d;
    d.hidden = 1152;
    d.heads = 16;
    d.intermediate = 4304;
    d.patch_dim = 3 * 2 * 16 * 16;
    d.pos_side = 48;
    d.merge = 2;
    d.out_hidden = 2048;
    return d;
}

}  // namespace

TEST(VisionMemory, WeightBytesCountEveryParameter) {
    const VisionWeights w = small_tower();
    // Matrices (bf16 on the device, f32 in reference precision) and vectors/tables (always f32).
    const size_t matrices = 96 * 64 + 2 * (64 * 192 + 64 * 64 + 64 * 96 + 96 * 64) + 256 * 256 + 256 * 48;
    const size_t vectors = 64 + 16 * 64 + 2 * (4 * 64 + 192 + 64 + 96 + 64) + 2 * 64 + 256 + 48;
    const size_t buffers = 2 + 1 + 2 * (4 + 8) + 2 + 4;  // each rounded up to 256 bytes at most
    const size_t bf16 = vision_weight_bytes(w, false), f32 = vision_weight_bytes(w, true);
    EXPECT_GE(bf16, 2 * matrices + 4 * vectors);
    EXPECT_LE(bf16, 2 * matrices + 4 * vectors + 256 * buffers);
    EXPECT_GE(f32, 4 * matrices + 4 * vectors);
    EXPECT_LE(f32, 4 * matrices + 4 * vectors + 256 * buffers);
}

TEST(VisionMemory, ArenaAtTheReleaseWidths) {
    const VisionDims d = release_dims();
    // VisionRunner::forward's buffers per patch row, bytes: patches 1536·4, taps 4·4 + 4·4, cos and
    // sin 2·36·4, tiles ≤ 16·(1/64 + 1/4), x h att tmp 4·1152·4, qkv 3·1152·4, mid 4304·4 = 55,940;
    // then the larger of a block GEMM's bf16 input copy (fc2: 4304·2 = 8,608) and the merger's
    // buffers per patch row (fc1 out 4608·4 + fc2 out 2048·4 + a bf16 copy 4608·2, over 4 rows:
    // 8,960): 64,900 bytes per row, plus at most 256 bytes of alignment per buffer.
    constexpr double kPerRow = 55940 + 8960;
    for (int64_t rows : {int64_t(784), int64_t(4096), int64_t(16384), int64_t(65536)}) {
        const double got = double(vision_arena_bytes(d, rows, false));
        EXPECT_GE(got, kPerRow * double(rows)) << rows;
        EXPECT_LE(got, kPerRow * double(rows) + 16 * 256 + 16.0 * double(rows) / 4) << rows;
    }
    // 2,048² pixels (16,384 rows): ~0.99 GiB; 4,096² (the release max_pixels): ~3.96 GiB.
    EXPECT_NEAR(double(vision_arena_bytes(d, 16384, false)) / double(1 << 30), 0.99, 0.01);
    // Reference precision: no bf16 copies; the merger's f32 buffers (26,624 / 4 per row) remain.
    const double f32_per_row = 55940 + (4608.0 * 4 + 2048 * 4) / 4;
    EXPECT_NEAR(double(vision_arena_bytes(d, 4096, true)) / 4096.0, f32_per_row, 8.0);
    EXPECT_EQ(vision_arena_bytes(d, 0, false), 0u);
}

TEST(VisionMemory, LargestImageRows) {
    // The release processor's max_pixels (4,096²) in 16-pixel patches; the test processor's 8,192.
    EXPECT_EQ(vision_max_patch_rows(16777216, 16), 65536);
    EXPECT_EQ(vision_max_patch_rows(8192, 16), 32);
    EXPECT_EQ(vision_max_patch_rows(8191, 16), 31);
    EXPECT_EQ(vision_max_patch_rows(0, 16), 0);
}

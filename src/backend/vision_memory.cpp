// Vision tower device memory arithmetic (see vision_memory.h). Mirrors VisionRunner::upload and
// VisionRunner::forward (backend/cuda/vision_tower.cpp) allocation by allocation.
#include "backend/vision_memory.h"

#include <algorithm>

namespace qs {

namespace {

constexpr size_t kAlign = 256;  // DeviceArena's block alignment (and cudaMalloc's, at least)
constexpr int64_t kAttnTileRows = 64;  // kVisionAttnTileRows (backend/cuda/vision_kernels.h)

size_t aligned(size_t bytes) { return (std::max<size_t>(bytes, 1) + kAlign - 1) / kAlign * kAlign; }

size_t linear_bytes(const VisionLinear& l, bool f32) {
    return aligned(size_t(l.in) * size_t(l.out) * (f32 ? 4 : 2)) + aligned(size_t(l.out) * 4);
}

size_t norm_bytes(const VisionNorm& n) { return aligned(n.w.size() * 4) + aligned(n.b.size() * 4); }

}  // namespace

size_t vision_weight_bytes(const VisionWeights& w, bool f32_linears) {
    size_t b = linear_bytes(w.patch_embed, f32_linears) + aligned(w.pos_embed.size() * 4);
    for (const VisionBlockWeights& k : w.blocks)
        b += norm_bytes(k.norm1) + norm_bytes(k.norm2) + linear_bytes(k.qkv, f32_linears) +
             linear_bytes(k.proj, f32_linears) + linear_bytes(k.fc1, f32_linears) + linear_bytes(k.fc2, f32_linears);
    return b + norm_bytes(w.merger_norm) + linear_bytes(w.merger_fc1, f32_linears) +
           linear_bytes(w.merger_fc2, f32_linears);
}

size_t vision_arena_bytes(const VisionDims& d, int64_t rows, bool f32_linears) {
    if (rows <= 0) return 0;
    const size_t R = size_t(rows), H = size_t(d.hidden), I = size_t(d.intermediate);
    const size_t half = size_t(std::max(d.head_dim(), 0) / 2), M2 = size_t(d.merge) * size_t(d.merge);
    // Attention tiles: at most one per kAttnTileRows rows of a frame, plus one per frame (a frame
    // has at least merge² rows).
    const size_t tiles = R / size_t(kAttnTileRows) + R / std::max<size_t>(M2, 1) + 1;
    // Held through the blocks: patches, tap indices and weights, cos and sin, tiles, x, h, qkv,
    // att, tmp, mid.
    const size_t held = aligned(R * size_t(d.patch_dim) * 4) + 2 * aligned(R * 4 * 4) + 2 * aligned(R * half * 4) +
                        aligned(tiles * 16) + 4 * aligned(R * H * 4) + aligned(R * 3 * H * 4) +
                        aligned(R * std::max(I, H) * 4);
    // A bf16 GEMM's copy of its input [T, in], released after the GEMM: the patch embedding
    // (in = patch_dim), qkv/proj/fc1 (hidden), fc2 (intermediate).
    const size_t gemm_copy = f32_linears ? 0 : aligned(R * std::max({size_t(d.patch_dim), H, I}) * 2);
    // Merger, after the blocks: fc1's output [rows/merge², merge²·hidden], fc2's output
    // [rows/merge², out_hidden], and the copy of fc1's or fc2's input (merge²·hidden wide).
    const size_t merged = R / std::max<size_t>(M2, 1);
    const size_t merger = aligned(merged * M2 * H * 4) + aligned(merged * size_t(d.out_hidden) * 4) +
                          (f32_linears ? 0 : aligned(merged * M2 * H * 2));
    return held + std::max(gemm_copy, merger);
}

int64_t vision_max_patch_rows(int64_t max_pixels, int patch_size) {
    if (max_pixels <= 0 || patch_size <= 0) return 0;
    return max_pixels / (int64_t(patch_size) * patch_size);
}

}  // namespace qs

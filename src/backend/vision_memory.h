// What the vision tower holds in a GPU backend's memory (CudaOps: backend/cuda/vision_tower.h),
// as host arithmetic: its weights, and the activation arena of one forward over a number of patch
// rows, both as the CUDA VisionRunner allocates them. The CUDA runner sizes its arena with
// vision_arena_bytes when it reserves the tower's memory before the KV cache is sized
// (Ops::reserve_vision_tower, model/model_backend.h), so the numbers are an upper bound of what
// a forward takes (every block rounded up to the arena's 256-byte alignment). Pure arithmetic,
// unit-tested on the CPU.
#pragma once

#include <cstddef>
#include <cstdint>

#include "backend/vision_weights.h"

namespace qs {

// Device bytes of the uploaded tower: the linears' weights in bf16 (f32 with `f32_linears`,
// the reference precision), every bias, norm and the position table in f32.
size_t vision_weight_bytes(const VisionWeights& w, bool f32_linears);

// Device bytes one forward over `rows` patch rows (all images of a request together) takes from
// the runner's arena at its peak: the patch rows, position taps, rotary tables, attention tiles,
// the block activations, the bf16 copy a GEMM makes of its input (not in reference precision),
// and the merger's buffers.
size_t vision_arena_bytes(const VisionDims& d, int64_t rows, bool f32_linears);

// The most patch rows one image can have once the image processor has resized it to at most
// `max_pixels` pixels with `patch_size`-pixel patches (a still image is one temporal patch).
int64_t vision_max_patch_rows(int64_t max_pixels, int patch_size);

}  // namespace qs

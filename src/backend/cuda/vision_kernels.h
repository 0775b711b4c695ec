// Kernels of the CUDA vision tower (backend/cuda/vision_tower.h; spec §1.3): the pieces around the
// cuBLASLt linears. CUDA twins of backend/cpu/cpu_vision.cpp, fp32 activations row-major.
// Launchers enqueue on `stream` and never sync.
#pragma once

#include <cstdint>

#include <cuda_runtime.h>

namespace qs::cuda {

enum class VisionAct : uint8_t { kNone, kGeluTanh, kGeluErf };

// y [R, n] = act(y + b) (b [n]); GELU evaluated in double as the reference does.
void launch_vision_bias_act(float* y, const float* b, int64_t R, int64_t n, VisionAct act, cudaStream_t stream);
// x [R, n] += y + b.
void launch_vision_residual_bias(float* x, const float* y, const float* b, int64_t R, int64_t n, cudaStream_t stream);
// y [R, n] = (x − mean) / sqrt(var + eps) · w + b per row (biased variance).
void launch_vision_layer_norm(const float* x, const float* w, const float* b, int64_t R, int64_t n, float eps, float* y,
                              cudaStream_t stream);
// x [R, H] += Σ_tap table[index[r, tap]] · weight[r, tap] over the 4 bilinear taps (cpu::
// vision_position_taps), summed in tap order from 0.
void launch_vision_pos_embed(float* x, const float* table, const int32_t* index, const float* weight, int64_t R,
                             int64_t H, cudaStream_t stream);
// The axial rotary on the q and k parts of qkv [R, 3·heads·hd]: rotate-half pairs (d, d + hd/2)
// with cos, sin [R, hd/2] (cpu::vision_rotary_tables).
void launch_vision_rope(float* qkv, const float* cos, const float* sin, int64_t R, int heads, int hd,
                        cudaStream_t stream);
// Bidirectional softmax attention within segments, fp32 on CUDA cores: tiles [num_tiles] of
// (first query row, end query row, first key row, end key row), at most kVisionAttnTileRows query
// rows each, every query row of a segment in exactly one tile; qkv [R, 3·heads·hd] (q | k | v, head
// by head); out [R, heads·hd]. hd <= 128.
constexpr int kVisionAttnTileRows = 64;
void launch_vision_attention(const float* qkv, const int4* tiles, int num_tiles, int heads, int hd, float* out,
                             cudaStream_t stream);

}  // namespace qs::cuda

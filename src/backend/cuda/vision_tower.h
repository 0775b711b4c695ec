// The vision tower on the GPU (spec §1.3; CudaOps::vision_tower): the CUDA twin of the host
// reference cpu::vision_tower (backend/cpu/cpu_vision.cpp). Linears on cuBLASLt (gemm.h: bf16
// weights and bf16-rounded inputs with fp32 accumulation, or fp32 without TF32 in reference
// precision), everything else in fp32 (vision_kernels.h): LayerNorm with bias, GELU (tanh in the
// blocks, erf in the merger), the position-table taps and the rotary tables (computed on the host
// by the reference's own functions and uploaded), bidirectional attention within each image frame,
// and the 2×2 merge (a reshape: the patch rows come in merge-block order).
// Thread-safety: called from the thread that submits a request while the engine thread runs
// forwards on the backend's stream and arena, so the runner owns its own stream, cuBLASLt handle
// and device arena, and serialises its callers with a mutex. The weights are uploaded on the first
// call for a VisionWeights (keyed by address; the struct must outlive the runner's use of it);
// the arena grows to the largest image seen (about 64 KB per patch row at the release sizes, the
// bf16 GEMM copies included: ~1 GB at 2,048² pixels) and is kept; `reserve` takes both up front.
#pragma once

#include <memory>
#include <mutex>
#include <vector>

#include <cuda_runtime.h>

#include "backend/cuda/device_memory.h"
#include "backend/cuda/gemm.h"
#include "backend/vision_weights.h"

namespace qs::cuda {

class VisionRunner {
public:
    VisionRunner(int device, bool reference_precision);
    ~VisionRunner();
    VisionRunner(const VisionRunner&) = delete;
    VisionRunner& operator=(const VisionRunner&) = delete;

    // Ops::vision_tower's contract: host patches in, host embeddings out (and the last block's
    // output when blocks_out is non-null). Returns after the results are on the host.
    void forward(const VisionWeights& w, const float* patches, const std::vector<VisionGrid>& grids, float* out,
                 float* blocks_out);
    // Uploads `w` (when not yet) and grows the arena to one chunk that holds a forward over up
    // to `max_rows` patch rows (vision_arena_bytes, backend/vision_memory.h), so serving images
    // takes no device memory beyond it. Returns the weights' and the arena's device bytes.
    size_t reserve(const VisionWeights& w, int64_t max_rows);
    size_t arena_reserved() const { return arena_.reserved(); }

private:
    struct Linear {
        DeviceBuffer w, b;
        DeviceLinear dl;
    };
    struct Norm {
        DeviceBuffer w, b;
    };
    struct Block {
        Norm norm1, norm2;
        Linear qkv, proj, fc1, fc2;
    };
    void upload(const VisionWeights& w);
    Linear upload_linear(const VisionLinear& l);
    Norm upload_norm(const VisionNorm& n);
    // y [T, out] = x · Wᵀ + b (act applied), the GEMM's scratch released after the call.
    void linear(const Linear& l, const float* x, int64_t T, float* y, int act);

    std::mutex mu_;
    int device_ = 0;
    bool reference_precision_ = false;
    cudaStream_t stream_ = nullptr;
    std::unique_ptr<Gemm> gemm_;  // made after cudaSetDevice(device_)
    DeviceArena arena_;
    const VisionWeights* uploaded_ = nullptr;
    size_t weight_bytes_ = 0;
    Linear patch_embed_, merger_fc1_, merger_fc2_;
    Norm merger_norm_;
    DeviceBuffer pos_embed_;
    std::vector<Block> blocks_;
};

}  // namespace qs::cuda

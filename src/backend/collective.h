// Collective: the communication a tensor-parallel forward needs between the ranks of one group
// (issue 22; docs/ARCHITECTURE.md, "Tensor parallel"). Each rank runs the same model code on its
// shard of the weights and calls these at the same points in the same order; buffers are in the
// rank's backend memory (what its Ops::alloc returns). Implementations: the CPU backend's
// in-process group (backend/cpu/cpu_collective.h, one thread per rank); NCCL for CUDA later.
#pragma once

#include <cstdint>

namespace qs {

class Collective {
public:
    virtual ~Collective() = default;
    virtual int rank() const = 0;
    virtual int size() const = 0;
    // x[0..n) = the sum over ranks of every rank's x[0..n). Every rank ends with the same values
    // (the ranks' terms are added in rank order on each of them).
    virtual void all_reduce_sum(float* x, int64_t n) = 0;
    // out [rows, size() · cols] = the ranks' local [rows, cols] blocks side by side, rank 0's
    // first (a column-split result such as the vocabulary-split lm_head's logits).
    virtual void all_gather_columns(const float* local, int64_t rows, int64_t cols, float* out) = 0;
};

}  // namespace qs

// ForwardGraphs: CUDA graphs of the model's layers for batches on a fixed stride (decode: one
// row per sequence; MTP verify: 1 + k rows per sequence; the GDN commit and the MTP head after
// a verify). A decode step launches ~15 kernels per layer (600 in all); at small batch the GPU
// finishes each faster than the host can launch the next, so single-stream decode is
// launch-bound. Capturing the layers once per padded shape and replaying the graph makes a step
// one launch.
//
// A graph is valid only while everything it captured stays the same: the batch buffers (fixed
// addresses, offsets fixed by the padded size), the cache storage (its id is in the key), the
// activation arena's state at the start (in the key; after a replay the arena is put into the
// state the capture left, so later allocations do not overlap the graph's result), weights and
// cuBLASLt plans (fixed after the first forward). Used from the engine thread.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <tuple>
#include <vector>

#include <cuda_runtime.h>

#include "backend/cuda/device_memory.h"

namespace qs::cuda {

class ForwardGraphs {
public:
    // Graphs for batches of up to max_batch sequences (0: none).
    explicit ForwardGraphs(int64_t max_batch);
    ~ForwardGraphs();
    ForwardGraphs(const ForwardGraphs&) = delete;
    ForwardGraphs& operator=(const ForwardGraphs&) = delete;

    // The padded number of sequences a batch of n sequences runs at: the smallest captured size
    // ≥ n, or 0 when n is above max_batch (then the batch runs without a graph).
    int64_t padded_size(int64_t n) const;
    const std::vector<int64_t>& sizes() const { return sizes_; }

    struct Key {
        int64_t rows;        // padded batch rows
        int32_t seq_rows;    // the stride: rows per sequence
        bool short_spans;    // Replay::short_spans
        bool stash;          // the forward stashes GDN inputs (a verify step without spare slots for all)
        uint64_t variant;    // Replay::variant
        uint64_t cache_id;   // CudaCacheStorage::id()
        size_t arena_chunk, arena_used;
        auto tie() const { return std::tie(rows, seq_rows, short_spans, stash, variant, cache_id, arena_chunk, arena_used); }
        bool operator<(const Key& o) const { return tie() < o.tie(); }
    };
    // Replays the graph for `key`, or captures `layers` into one (which must only enqueue work
    // on `stream`) and launches it. Returns the layers' result buffer.
    float* run(const Key& key, cudaStream_t stream, DeviceArena& arena, const std::function<float*()>& layers);
    // Drops every graph (the buffers they captured are about to move). Synchronises `stream`.
    void clear(cudaStream_t stream);

    int64_t captures() const { return captures_; }
    int64_t replays() const { return replays_; }

private:
    struct Entry {
        cudaGraphExec_t exec = nullptr;
        float* result = nullptr;
        DeviceArena::State arena_after;
    };
    std::vector<int64_t> sizes_;
    std::map<Key, Entry> graphs_;
    int64_t captures_ = 0, replays_ = 0;
};

}  // namespace qs::cuda

// Device memory for the CUDA backend: an owning buffer, and the activation arena the model's
// Ops::alloc() calls draw from (bump pointer, reset by free_all at the end of every forward).
// The arena never frees chunks during a forward, so pointers stay valid until free_all; once
// warmed up to the largest batch it stops allocating (CUDA graphs need fixed addresses).
// Used from the engine thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace qs::cuda {

class DeviceBuffer {
public:
    DeviceBuffer() = default;
    explicit DeviceBuffer(size_t bytes);
    ~DeviceBuffer();
    DeviceBuffer(DeviceBuffer&& o) noexcept : ptr_(o.ptr_), bytes_(o.bytes_) { o.ptr_ = nullptr, o.bytes_ = 0; }
    DeviceBuffer& operator=(DeviceBuffer&& o) noexcept;
    DeviceBuffer(const DeviceBuffer&) = delete;
    DeviceBuffer& operator=(const DeviceBuffer&) = delete;

    void* get() const { return ptr_; }
    template <class T>
    T* as() const { return static_cast<T*>(ptr_); }
    size_t bytes() const { return bytes_; }

private:
    void* ptr_ = nullptr;
    size_t bytes_ = 0;
};

class DeviceArena {
public:
    explicit DeviceArena(size_t chunk_bytes = size_t(256) << 20) : chunk_bytes_(chunk_bytes) {}
    // 256-byte aligned block of `bytes`; contents undefined. Blocks are handed out as a stack.
    // A block no chunk from the current one on can hold gets a new chunk of the chunk size, or
    // of the block plus a quarter when larger: the stack only moves forward, so a chunk of the
    // block's exact size would be missed by the next step's slightly larger block (a serving
    // step's blocks vary with its token count) and every new maximum would take another chunk.
    void* allocate(size_t bytes);
    void reset();              // every block handed out since the last reset becomes free
    // The current top of the stack, and a release of every block handed out after it.
    struct Mark {
        size_t chunk = 0, used = 0, in_use = 0;
    };
    Mark mark() const { return {current_, chunks_.empty() ? 0 : chunks_[current_].used, in_use_}; }
    void release_to(const Mark& m);
    // The whole allocation state, to put back after replaying a captured CUDA graph in place of
    // the allocations its capture made (chunks are never freed, so a state stays restorable).
    struct State {
        std::vector<size_t> used;  // per chunk
        size_t current = 0, in_use = 0;
    };
    State state() const;
    void restore(const State& s);
    size_t high_water() const { return high_water_; }
    size_t reserved() const;   // bytes held from the device
    // What is allocating (an op's name), for the line a growth past the chunk size logs.
    void set_label(const char* label) { label_ = label; }

private:
    struct Chunk {
        DeviceBuffer buffer;
        size_t used = 0;
    };
    size_t chunk_bytes_;
    std::vector<Chunk> chunks_;
    size_t current_ = 0;  // chunk the next block comes from; chunks after it are empty
    size_t in_use_ = 0, high_water_ = 0;
    const char* label_ = "";
};

}  // namespace qs::cuda

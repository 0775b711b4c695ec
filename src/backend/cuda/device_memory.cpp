// DeviceBuffer and DeviceArena (see device_memory.h).
#include "backend/cuda/device_memory.h"

#include <algorithm>

#include "backend/cuda/cuda_check.h"
#include "core/check.h"
#include "core/log.h"

namespace qs::cuda {

DeviceBuffer::DeviceBuffer(size_t bytes) : bytes_(bytes) {
    if (bytes == 0) return;
    const cudaError_t err = cudaMalloc(&ptr_, bytes);
    if (err == cudaErrorMemoryAllocation) {
        // Still fatal (the forward cannot go on without it), but say what to turn.
        size_t free_b = 0, total_b = 0;
        cudaMemGetInfo(&free_b, &total_b);
        log_error("cuda: out of device memory allocating {:.1f} MiB ({:.1f} of {:.1f} GiB free); at start-up "
                  "lower --max-num-batched-tokens or --gpu-memory-utilization, or give --cache-memory-mb",
                  double(bytes) / double(1 << 20), double(free_b) / double(1 << 30), double(total_b) / double(1 << 30));
    }
    QS_CUDA_CHECK(err);
}

DeviceBuffer::~DeviceBuffer() {
    if (ptr_) cudaFree(ptr_);
}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& o) noexcept {
    if (this != &o) {
        if (ptr_) cudaFree(ptr_);
        ptr_ = o.ptr_, bytes_ = o.bytes_;
        o.ptr_ = nullptr, o.bytes_ = 0;
    }
    return *this;
}

void* DeviceArena::allocate(size_t bytes) {
    bytes = (std::max<size_t>(bytes, 1) + 255) / 256 * 256;
    // Stack order: the current chunk, else the next chunk that is large enough (skipped chunks
    // stay empty until a release), else a new one.
    for (size_t i = current_; i < chunks_.size(); ++i) {
        Chunk& c = chunks_[i];
        if (c.buffer.bytes() - c.used >= bytes) {
            void* p = static_cast<char*>(c.buffer.get()) + c.used;
            c.used += bytes;
            current_ = i;
            in_use_ += bytes;
            high_water_ = std::max(high_water_, in_use_);
            return p;
        }
    }
    const size_t chunk = bytes > chunk_bytes_ ? (bytes + bytes / 4 + 255) / 256 * 256 : chunk_bytes_;
    // A chunk larger than the default is worth a line: the arena keeps it for good.
    if (bytes > chunk_bytes_)
        log_info("cuda: activation arena grows by {:.0f} MB for a {:.0f} MB block ({}; {:.0f} MB in use, {:.0f} MB "
                 "reserved, high water {:.0f} MB)",
                 double(chunk) / 1048576.0, double(bytes) / 1048576.0, label_[0] ? label_ : "unlabelled",
                 double(in_use_) / 1048576.0, double(reserved()) / 1048576.0, double(high_water_) / 1048576.0);
    Chunk c{DeviceBuffer(chunk), bytes};
    void* p = c.buffer.get();
    chunks_.push_back(std::move(c));
    current_ = chunks_.size() - 1;
    in_use_ += bytes;
    high_water_ = std::max(high_water_, in_use_);
    return p;
}

void DeviceArena::reset() {
    for (Chunk& c : chunks_) c.used = 0;
    current_ = 0;
    in_use_ = 0;
}

void DeviceArena::release_to(const Mark& m) {
    if (chunks_.empty()) return;
    for (size_t i = m.chunk + 1; i < chunks_.size(); ++i) chunks_[i].used = 0;
    chunks_[m.chunk].used = m.used;
    current_ = m.chunk;
    in_use_ = m.in_use;
}

DeviceArena::State DeviceArena::state() const {
    State s;
    s.used.reserve(chunks_.size());
    for (const Chunk& c : chunks_) s.used.push_back(c.used);
    s.current = current_;
    s.in_use = in_use_;
    return s;
}

void DeviceArena::restore(const State& s) {
    QS_CHECK_MSG(s.used.size() <= chunks_.size(), "DeviceArena::restore: a state from a larger arena");
    for (size_t i = 0; i < chunks_.size(); ++i) chunks_[i].used = i < s.used.size() ? s.used[i] : 0;
    current_ = s.current;
    in_use_ = s.in_use;
    high_water_ = std::max(high_water_, in_use_);
}

size_t DeviceArena::reserved() const {
    size_t n = 0;
    for (const Chunk& c : chunks_) n += c.buffer.bytes();
    return n;
}

}  // namespace qs::cuda

// Host memory for what a backend copies to the device every step, and an allocator over it.
// The grammar bitmasks of a SamplingBatch are the case: 512 constrained rows are 16 MB a step
// at the Qwen3.6 vocabulary. From page-locked memory (the CUDA backend's UploadMemory) the copy
// is a DMA that runs beside the forward; from pageable memory the driver first copies it
// through a staging buffer on the host, after the forward. UploadAllocator also leaves new
// elements default-initialised (no zeroing on resize): the bitmask rows are written in full
// by the grammar fill, so zeroing them first would be a second pass over the 16 MB. Any thread.
#pragma once

#include <cstddef>
#include <new>
#include <type_traits>
#include <utility>

namespace qs {

class UploadMemory {
public:
    virtual ~UploadMemory() = default;
    // `bytes` (> 0) aligned for any scalar type; never null (aborts when out of memory).
    virtual void* allocate(size_t bytes) = 0;
    virtual void deallocate(void* p, size_t bytes) noexcept = 0;
};

// Plain heap memory (operator new): the backends that read host memory directly, and the
// default of a default-constructed UploadAllocator.
UploadMemory& heap_upload_memory();

template <class T>
class UploadAllocator {
public:
    using value_type = T;
    using propagate_on_container_copy_assignment = std::true_type;
    using propagate_on_container_move_assignment = std::true_type;
    using propagate_on_container_swap = std::true_type;

    UploadAllocator() noexcept : memory_(&heap_upload_memory()) {}
    explicit UploadAllocator(UploadMemory& memory) noexcept : memory_(&memory) {}
    template <class U>
    UploadAllocator(const UploadAllocator<U>& o) noexcept : memory_(o.memory()) {}

    T* allocate(size_t n) { return static_cast<T*>(memory_->allocate(n * sizeof(T))); }
    void deallocate(T* p, size_t n) noexcept { memory_->deallocate(p, n * sizeof(T)); }
    // resize(n) default-initialises (for uint32_t: leaves the words unset); resize(n, v),
    // assign and push_back construct from their arguments as usual.
    template <class U>
    void construct(U* p) noexcept(std::is_nothrow_default_constructible_v<U>) {
        ::new (static_cast<void*>(p)) U;
    }
    template <class U, class... Args>
    void construct(U* p, Args&&... args) {
        ::new (static_cast<void*>(p)) U(std::forward<Args>(args)...);
    }

    UploadMemory* memory() const noexcept { return memory_; }
    template <class U>
    bool operator==(const UploadAllocator<U>& o) const noexcept {
        return memory_ == o.memory();
    }

private:
    UploadMemory* memory_;
};

}  // namespace qs

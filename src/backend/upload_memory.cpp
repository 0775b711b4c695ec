// heap_upload_memory (see upload_memory.h).
#include "backend/upload_memory.h"

namespace qs {

namespace {

class HeapUploadMemory final : public UploadMemory {
public:
    void* allocate(size_t bytes) override { return ::operator new(bytes); }
    void deallocate(void* p, size_t) noexcept override { ::operator delete(p); }
};

}  // namespace

UploadMemory& heap_upload_memory() {
    static HeapUploadMemory memory;  // stateless: outlives every allocator that points to it
    return memory;
}

}  // namespace qs

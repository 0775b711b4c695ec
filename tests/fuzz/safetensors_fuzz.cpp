// libFuzzer harness: the safetensors reader (io/safetensors) on arbitrary file contents.
// Input: the whole file (u64 header length, JSON header, data). The bytes go to a memfd opened
// by path, so open() runs exactly as on disk (fstat, mmap, header checks). A file must open or
// give a Status; an opened file's tensors must lie inside the mapping without overlapping.
#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "fuzz_input.h"
#include "io/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    static const int fd = memfd_create("safetensors_fuzz", 0);
    static const std::string path = "/proc/self/fd/" + std::to_string(fd);
    QS_FUZZ_ASSERT(fd >= 0);
    QS_FUZZ_ASSERT(ftruncate(fd, 0) == 0);
    QS_FUZZ_ASSERT(pwrite(fd, data, size, 0) == ssize_t(size));
    auto f = qs::SafetensorsFile::open(path);
    if (!f.is_ok()) return 0;
    const qs::SafetensorsFile& file = *f.value();
    const uint8_t* begin = file.map_data();
    const uint8_t* end = begin + file.map_bytes();
    QS_FUZZ_ASSERT(file.map_bytes() == size);
    for (const auto& [name, t] : file.tensors()) {
        QS_FUZZ_ASSERT(t.data >= begin + 8 && t.data <= end);
        QS_FUZZ_ASSERT(t.nbytes <= size_t(end - t.data));
        QS_FUZZ_ASSERT(t.numel() >= 0);
        QS_FUZZ_ASSERT(uint64_t(t.numel()) * qs::dtype_size(t.dtype) == t.nbytes || t.nbytes == 0);
        // Touch every byte: a range past the mapping would fault here.
        uint8_t sum = 0;
        for (size_t i = 0; i < t.nbytes; ++i) sum ^= t.data[i];
        (void)sum;
        QS_FUZZ_ASSERT(file.find(name) == &t);
    }
    return 0;
}

// Safetensors files: mmap'd, with the JSON header parsed and every tensor's dtype, shape and
// byte range checked against the file before anything reads it. A broken file yields a Status
// naming the file (and the tensor where one is at fault), never a crash.
// Format: u64 little-endian header length N, N bytes of JSON header, then the data section.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/status.h"

namespace qs {

// A read-only view of one tensor inside an mmap'd file (lifetime: its SafetensorsFile).
// `data` is not necessarily aligned to the element size (the format packs tensors back to back):
// read through memcpy / load_as_f32, or check alignment before casting.
struct TensorInfo {
    std::string name;
    DType dtype = DType::kF32;
    std::vector<int64_t> shape;
    const uint8_t* data = nullptr;
    size_t nbytes = 0;
    std::string file;  // the file it lives in (for messages)

    int64_t numel() const;
};

class SafetensorsFile {
public:
    // Largest header accepted (the format's own limit is 100 MB).
    static constexpr uint64_t kMaxHeaderBytes = 100ull << 20;

    static Result<std::shared_ptr<SafetensorsFile>> open(const std::string& path);
    ~SafetensorsFile();
    SafetensorsFile(const SafetensorsFile&) = delete;
    SafetensorsFile& operator=(const SafetensorsFile&) = delete;

    const std::string& path() const { return path_; }
    const std::map<std::string, TensorInfo>& tensors() const { return tensors_; }
    const TensorInfo* find(const std::string& name) const;
    const std::map<std::string, std::string>& metadata() const { return metadata_; }
    // The whole mapped file; every TensorInfo::data range lies inside it (tests check this).
    const uint8_t* map_data() const { return static_cast<const uint8_t*>(map_); }
    size_t map_bytes() const { return map_bytes_; }

private:
    SafetensorsFile() = default;
    std::string path_;
    void* map_ = nullptr;
    size_t map_bytes_ = 0;
    std::map<std::string, TensorInfo> tensors_;
    std::map<std::string, std::string> metadata_;
};

// Writes tensors to a safetensors file (used by `quantize`, tests and fixtures). Data is copied.
// Tensors appear in the order given, packed back to back after a header padded with spaces to a
// multiple of 8 bytes (so the data section is 8-byte aligned; tensors are aligned only if the
// sizes before them are multiples of 8 — gaps would make the reference library reject the file).
// Atomic: written to path + ".tmp" and renamed; on any error no file (partial or tmp) is left.
struct TensorToWrite {
    std::string name;
    DType dtype;
    std::vector<int64_t> shape;
    const void* data;
};
Status write_safetensors(const std::string& path, const std::vector<TensorToWrite>& tensors,
                         const std::map<std::string, std::string>& metadata = {});

}  // namespace qs

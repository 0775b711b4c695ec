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

private:
    SafetensorsFile() = default;
    std::string path_;
    void* map_ = nullptr;
    size_t map_bytes_ = 0;
    std::map<std::string, TensorInfo> tensors_;
    std::map<std::string, std::string> metadata_;
};

// Writes tensors to a safetensors file (used by `quantize`, tests and fixtures). Data is copied.
struct TensorToWrite {
    std::string name;
    DType dtype;
    std::vector<int64_t> shape;
    const void* data;
};
Status write_safetensors(const std::string& path, const std::vector<TensorToWrite>& tensors,
                         const std::map<std::string, std::string>& metadata = {});

}  // namespace qs

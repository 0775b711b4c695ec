// NumPy .npy files: the exchange format for reference logits and token ids between the
// transformers fixture scripts (tools/) and our tests and the `logits` command.
// Writes float32 / int64, C order, format v1.0, atomically (path + ".tmp", then rename).
// Reads little-endian <f4, <f8 (narrowed to float), <i4, <i8 (widened to int64) in C order,
// format v1.0/2.0/3.0. Every error names the file. Any thread; no shared state.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"

namespace qs {

struct NpyFloatArray {
    std::vector<int64_t> shape;  // () for a scalar
    std::vector<float> data;     // [prod(shape)] C order
    int64_t numel() const { return int64_t(data.size()); }
};

struct NpyIntArray {
    std::vector<int64_t> shape;  // () for a scalar
    std::vector<int64_t> data;   // [prod(shape)] C order
    int64_t numel() const { return int64_t(data.size()); }
};

// `data` holds prod(shape) elements in C order (shape {} = scalar, one element).
Status write_npy(const std::string& path, const float* data, const std::vector<int64_t>& shape);
Status write_npy(const std::string& path, const int64_t* data, const std::vector<int64_t>& shape);

// dtype <f4 or <f8; an integer file is an error that says which reader to use.
Result<NpyFloatArray> read_npy_float(const std::string& path);
// dtype <i4 or <i8.
Result<NpyIntArray> read_npy_int(const std::string& path);

}  // namespace qs

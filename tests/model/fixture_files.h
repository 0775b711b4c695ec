// Reading the files of a transformers-made fixture: raw bytes, and .npy ids and floats (a read
// error fails the calling test and gives an empty result).
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "io/npy.h"

namespace qs::test {

inline std::string read_bytes(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
}

inline std::vector<int32_t> read_ids(const std::string& path) {
    auto r = read_npy_int(path);
    EXPECT_TRUE(r.is_ok()) << path;
    std::vector<int32_t> out;
    if (r.is_ok())
        for (int64_t v : r->data) out.push_back(int32_t(v));
    return out;
}

inline std::vector<float> read_floats(const std::string& path) {
    auto r = read_npy_float(path);
    EXPECT_TRUE(r.is_ok()) << path;
    return r.is_ok() ? r->data : std::vector<float>();
}

}  // namespace qs::test

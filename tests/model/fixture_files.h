// Reading the files of a transformers-made fixture: raw bytes, and .npy ids and floats (a read
// error fails the calling test and gives an empty result).
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "../common/test_files.h"
#include "io/npy.h"
#include "model/prompt_images.h"

namespace qs::test {

inline std::string read_bytes(const std::string& path) { return read_fixture(path); }

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

// The prompt's M-RoPE positions and delta equal transformers' get_rope_index (`dir`/positions.npy,
// [3, T]; `rope_delta` from the fixture's case file).
inline void expect_positions_equal(const PromptImages& pi, const std::string& dir, size_t T, int64_t rope_delta) {
    auto pos = read_npy_int(dir + "/positions.npy");
    ASSERT_TRUE(pos.is_ok()) << dir;
    for (size_t k = 0; k < 3; ++k)
        for (size_t i = 0; i < T; ++i) EXPECT_EQ(pi.positions.pos[k][i], pos->data[k * T + i]) << k << " " << i;
    EXPECT_EQ(pi.positions.delta, rope_delta);
}

}  // namespace qs::test

// An 8-bit RGB raster: what every decoder produces and the resampler reads. Row-major,
// interleaved R,G,B; no alpha (dropped as PIL's convert("RGB") drops it).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace qs {

struct RgbImage {
    int width = 0;
    int height = 0;
    std::vector<uint8_t> rgb;  // [height][width][3]

    int64_t pixels() const { return int64_t(width) * height; }
    const uint8_t* row(int y) const { return rgb.data() + size_t(y) * size_t(width) * 3; }
};

}  // namespace qs

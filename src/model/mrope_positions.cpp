#include "model/mrope_positions.h"

#include <algorithm>

#include <fmt/format.h>

namespace qs {

Result<MropePositions> mrope_positions(const std::vector<bool>& is_image, const std::vector<ImageGrid>& grids,
                                       int merge) {
    std::vector<uint8_t> kind(is_image.size());
    for (size_t i = 0; i < kind.size(); ++i) kind[i] = is_image[i] ? 1 : 0;
    return mrope_positions(kind, grids, merge);
}

Result<MropePositions> mrope_positions(const std::vector<uint8_t>& kind, const std::vector<ImageGrid>& grids,
                                       int merge) {
    MropePositions out;
    const size_t n = kind.size();
    for (auto& s : out.pos) s.resize(n);
    int64_t cur = 0, max_pos = -1;
    size_t next_image = 0;
    size_t i = 0;
    while (i < n) {
        if (kind[i] == 0) {
            for (auto& s : out.pos) s[i] = int32_t(cur);
            max_pos = std::max(max_pos, cur);
            ++cur;
            ++i;
            continue;
        }
        size_t end = i;
        while (end < n && kind[end] == kind[i]) ++end;
        if (next_image >= grids.size()) {
            return invalid_argument(fmt::format("more image placeholder runs than the {} images given", grids.size()));
        }
        const ImageGrid g = grids[next_image++];
        if (g.t < 1 || g.h % merge != 0 || g.w % merge != 0 || g.h < merge || g.w < merge) {
            return invalid_argument(fmt::format("image grid {}x{}x{} is not a multiple of the merge size {}", g.t, g.h,
                                                g.w, merge));
        }
        const int lh = g.h / merge, lw = g.w / merge;
        const size_t want = size_t(g.t) * size_t(lh) * size_t(lw);
        if (end - i != want) {
            return invalid_argument(fmt::format("image {} has {} placeholder tokens, its grid needs {}", next_image,
                                                end - i, want));
        }
        size_t k = i;
        for (int ti = 0; ti < g.t; ++ti) {
            for (int r = 0; r < lh; ++r) {
                for (int c = 0; c < lw; ++c, ++k) {
                    out.pos[0][k] = int32_t(cur + ti);
                    out.pos[1][k] = int32_t(cur + r);
                    out.pos[2][k] = int32_t(cur + c);
                    max_pos = std::max({max_pos, cur + ti, cur + r, cur + c});
                }
            }
        }
        cur += std::max(lh, lw);
        i = end;
    }
    if (next_image != grids.size()) {
        return invalid_argument(fmt::format("{} images given, {} placeholder runs in the prompt", grids.size(), next_image));
    }
    out.delta = max_pos + 1 - int64_t(n);
    return out;
}

}  // namespace qs

// M-RoPE positions of a prompt with images (transformers 5.17 Qwen3_5MoeModel.get_rope_index):
// text tokens get (p, p, p) with p counting on from the previous token's stream; the merged tokens
// of an image with grid (t, h, w) patches and merge m get (p0 + ti, p0 + row, p0 + column) for
// ti < t, row < h/m, column < w/m (row-major), where p0 is the position the image starts at, and
// the text after it continues at p0 + max(h, w)/m. Every position after the prompt is then the
// token index plus `delta` (max position + 1 - prompt length), in all three streams: decode,
// chunked prefill and MTP need only the delta. Checked against transformers in
// tests/model/vision_tower_test.cpp. Pure function; any thread.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "core/status.h"

namespace qs {

struct ImageGrid {
    int t = 1, h = 0, w = 0;  // in patches, before merging
};

struct MropePositions {
    std::array<std::vector<int32_t>, 3> pos;  // [t/h/w stream][token]
    int64_t delta = 0;
};

// is_image[i]: token i is an image placeholder (<|image_pad|>). Each maximal run of placeholders is
// the next image of `grids` and must have t·(h/m)·(w/m) tokens; a mismatch is kInvalidArgument.
Result<MropePositions> mrope_positions(const std::vector<bool>& is_image, const std::vector<ImageGrid>& grids,
                                       int merge);
// The same with token kinds (0 text, else a media kind: 1 image, 2 video, as transformers'
// mm_token_type_ids): a run ends where the kind changes. A video of grid (t, h, w) is given as t
// grids (1, h, w), one per temporal patch run (get_rope_index splits video_grid_thw so).
Result<MropePositions> mrope_positions(const std::vector<uint8_t>& kind, const std::vector<ImageGrid>& grids,
                                       int merge);

}  // namespace qs

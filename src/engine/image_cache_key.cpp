// Prefix-cache keys of prompts with images (see image_cache_key.h).
#include "engine/image_cache_key.h"

#define XXH_INLINE_ALL
#include <xxhash.h>

#include <cstring>

#include "model/media_runs.h"

namespace qs {

ImageHash image_pixel_hash(const ImagePatches& image) {
    XXH3_state_t* st = XXH3_createState();
    XXH3_128bits_reset(st);
    const int64_t grid[5] = {image.grid_t, image.grid_h, image.grid_w, image.patch_dim, image.video ? 1 : 0};
    XXH3_128bits_update(st, grid, sizeof(grid));
    XXH3_128bits_update(st, image.values.data(), image.values.size() * sizeof(float));
    const XXH128_hash_t h = XXH3_128bits_digest(st);
    XXH3_freeState(st);
    return {h.low64, h.high64};
}

std::vector<int32_t> image_cache_key(const std::vector<int32_t>& prompt, int64_t image_token_id,
                                     const std::vector<std::shared_ptr<const ImagePatches>>& images,
                                     int64_t video_token_id, int merge) {
    std::vector<int32_t> key = prompt;
    std::vector<const ImagePatches*> media;
    for (const auto& p : images) media.push_back(p.get());
    auto runs = media_runs(prompt, image_token_id, video_token_id, media, merge);
    if (!runs.is_ok()) return key;
    size_t current = media.size();
    ImageHash h;
    uint64_t j = 0;
    for (const MediaRun& r : runs.value()) {
        if (r.media != current) {  // the next image or video
            current = r.media;
            h = image_pixel_hash(*media[current]);
            j = 0;
        }
        for (size_t i = r.begin; i < r.end; ++i) {
            // One 64-bit mix of the media hash and the pad index, folded to 31 bits, made negative.
            const uint64_t words[3] = {h.lo, h.hi, j++};
            const uint64_t m = XXH3_64bits(words, sizeof(words));
            key[i] = -1 - int32_t(m & 0x7ffffffe);
        }
    }
    return key;
}

}  // namespace qs

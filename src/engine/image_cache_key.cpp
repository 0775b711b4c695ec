// Prefix-cache keys of prompts with images (see image_cache_key.h).
#include "engine/image_cache_key.h"

#define XXH_INLINE_ALL
#include <xxhash.h>

#include <cstring>

namespace qs {

ImageHash image_pixel_hash(const ImagePatches& image) {
    XXH3_state_t* st = XXH3_createState();
    XXH3_128bits_reset(st);
    const int64_t grid[4] = {image.grid_t, image.grid_h, image.grid_w, image.patch_dim};
    XXH3_128bits_update(st, grid, sizeof(grid));
    XXH3_128bits_update(st, image.values.data(), image.values.size() * sizeof(float));
    const XXH128_hash_t h = XXH3_128bits_digest(st);
    XXH3_freeState(st);
    return {h.low64, h.high64};
}

std::vector<int32_t> image_cache_key(const std::vector<int32_t>& prompt, int64_t image_token_id,
                                     const std::vector<std::shared_ptr<const ImagePatches>>& images) {
    std::vector<int32_t> key = prompt;
    size_t image = 0;
    ImageHash h;
    uint64_t j = 0;
    for (size_t i = 0; i < key.size(); ++i) {
        if (key[i] != image_token_id) continue;
        if (i == 0 || prompt[i - 1] != image_token_id) {  // a new run: the next image
            if (image >= images.size()) break;
            h = image_pixel_hash(*images[image++]);
            j = 0;
        }
        // One 64-bit mix of the image hash and the pad index, folded to 31 bits, made negative.
        const uint64_t words[3] = {h.lo, h.hi, j++};
        const uint64_t m = XXH3_64bits(words, sizeof(words));
        key[i] = -1 - int32_t(m & 0x7ffffffe);
    }
    return key;
}

}  // namespace qs

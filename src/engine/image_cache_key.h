// The prefix cache's view of a prompt with images and videos: its tokens with every <|image_pad|>
// and <|video_pad|> replaced by a key derived from the image's (video's) pixels, so the page keys (and the token comparison a cache hit
// makes, BlockPool) tell two images apart even though their placeholder tokens are identical.
// Pad j of an image becomes a negative value (token ids are never negative) from XXH3-128 of the
// image's grid and pixel values and j: every pad carries 31 bits of the image's hash, so pages
// covering k pads of two different images are told apart unless 31·k hash bits agree. Text tokens
// are unchanged (pages before the first image are shared with text-only prompts). Pure; any thread.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "image/image_processor.h"

namespace qs {

// XXH3-128 of an image's grid and patch values: two images share it only if their pixels do.
struct ImageHash {
    uint64_t lo = 0, hi = 0;
    bool operator==(const ImageHash&) const = default;
};
ImageHash image_pixel_hash(const ImagePatches& image);

// `prompt` with the pads of media i (images and videos in prompt order, placed as
// model/media_runs places them: an image is one run of image_token_id, a video grid_t runs of
// video_token_id) replaced by keys of image_pixel_hash(*images[i]), the pad index counting on
// across a video's runs. A prompt whose runs do not match the media (refused earlier by
// prepare_prompt_images) keeps its token ids.
std::vector<int32_t> image_cache_key(const std::vector<int32_t>& prompt, int64_t image_token_id,
                                     const std::vector<std::shared_ptr<const ImagePatches>>& images,
                                     int64_t video_token_id = -1, int merge = 2);

}  // namespace qs

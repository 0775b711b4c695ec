// Where a prompt's images and videos sit: the maximal runs of <|image_pad|> or <|video_pad|>
// (a change from one to the other starts a new run), matched in order with the request's media
// (images and videos in prompt order). An image is one run of t·(h/m)·(w/m) pads; a video with
// grid_t temporal patches is grid_t runs of (h/m)·(w/m) pads each, one per temporal patch (the
// processor writes each after its timestamp, text between them), exactly as transformers'
// get_rope_index splits video_grid_thw into grid_t frames. Pure; any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/status.h"
#include "image/image_processor.h"

namespace qs {

struct MediaRun {
    size_t begin = 0, end = 0;  // token range [begin, end)
    size_t media = 0;           // index into the media list
    int frame = 0;              // temporal patch of a video (0 for an image)
    bool video = false;
};

// Every mismatch (a run of the wrong kind or length, more or fewer runs than the media need) is
// kInvalidArgument naming the media ("video 1 ...", "image 2 ...").
Result<std::vector<MediaRun>> media_runs(const std::vector<int32_t>& prompt, int64_t image_token_id,
                                         int64_t video_token_id, const std::vector<const ImagePatches*>& media,
                                         int merge);

}  // namespace qs

// A chat request's images: the image_url parts' URLs (in message order) → bytes (image_fetch) →
// RGB (image/image_decode, the pixel limit checked from the header) → patches
// (image/image_processor, the model's preprocessor_config.json); and the rendered prompt's one
// <|image_pad|> per image expanded to the image's merged-token count, as transformers' processor
// expands it before the model sees it (videos: server/video_input, expand_media_pads). Errors are kInvalidArgument naming the image
// ("messages image 2: ..."). Worker threads; no shared state.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/status.h"
#include "image/image_processor.h"
#include "image/video_processor.h"
#include "server/image_fetch.h"

namespace qs {

// What the served model needs to take images and videos (ServerState::vision; absent: a text-only
// model).
struct VisionInput {
    ImageProcessorConfig processor;
    VideoProcessorConfig video;  // video_preprocessor_config.json (its defaults when absent)
    int32_t image_token_id = -1;
    int32_t video_token_id = -1;
    int32_t vision_start_token_id = -1, vision_end_token_id = -1;
};

// A request's images and videos in prompt order. For a video, frame_prefix[t] is the tokens of
// its temporal patch t's timestamp ("<0.5 seconds>"); empty for an image.
struct PromptMedia {
    std::shared_ptr<const ImagePatches> patches;
    std::vector<std::vector<int32_t>> frame_prefix;
};

Result<std::vector<std::shared_ptr<const ImagePatches>>> load_images(const std::vector<std::string>& urls,
                                                                   const ImageInputOptions& options,
                                                                   const ImageProcessorConfig& processor);

// Replaces the i-th `image_token_id` in ids by images[i]'s merged tokens (that many copies). The
// prompt must hold exactly one pad per image (the chat template writes one per image part).
Status expand_image_pads(std::vector<int32_t>& ids, int32_t image_token_id,
                         const std::vector<std::shared_ptr<const ImagePatches>>& images, int merge_size);

// The template's one pad per image or video part expanded as Qwen3VLProcessor expands it: the
// i-th `image_token_id` or `video_token_id` (in prompt order) is media[i]'s, an image's pad
// becomes its merged tokens, a video's pad becomes, per temporal patch t, frame_prefix[t],
// <|vision_start|>, (h/m)·(w/m) video pads, <|vision_end|> (inside the template's own
// vision_start/end). The pads' kinds must match the media's, one each.
Status expand_media_pads(std::vector<int32_t>& ids, const VisionInput& vision, const std::vector<PromptMedia>& media);

}  // namespace qs

// A chat request's images: the image_url parts' URLs (in message order) → bytes (image_fetch) →
// RGB (image/image_decode, the pixel limit checked from the header) → patches
// (image/image_processor, the model's preprocessor_config.json); and the rendered prompt's one
// <|image_pad|> per image expanded to the image's merged-token count, as transformers' processor
// expands it before the model sees it. Errors are kInvalidArgument naming the image
// ("messages image 2: ..."). Worker threads; no shared state.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/status.h"
#include "image/image_processor.h"
#include "server/image_fetch.h"

namespace qs {

// What the served model needs to take images (ServerState::vision; absent: a text-only model).
struct VisionInput {
    ImageProcessorConfig processor;
    int32_t image_token_id = -1;
};

Result<std::vector<std::shared_ptr<const ImagePatches>>> load_images(const std::vector<std::string>& urls,
                                                                   const ImageInputOptions& options,
                                                                   const ImageProcessorConfig& processor);

// Replaces the i-th `image_token_id` in ids by images[i]'s merged tokens (that many copies). The
// prompt must hold exactly one pad per image (the chat template writes one per image part).
Status expand_image_pads(std::vector<int32_t>& ids, int32_t image_token_id,
                         const std::vector<std::shared_ptr<const ImagePatches>>& images, int merge_size);

}  // namespace qs

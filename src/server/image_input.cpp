// Chat request images: fetch, decode, preprocess, pad expansion (see image_input.h).
#include "server/image_input.h"

#include <fmt/format.h>

#include "image/image_decode.h"

namespace qs {

Result<std::vector<std::shared_ptr<const ImagePatches>>> load_images(const std::vector<std::string>& urls,
                                                                   const ImageInputOptions& options,
                                                                   const ImageProcessorConfig& processor) {
    if (int64_t(urls.size()) > options.max_images_per_request)
        return invalid_argument(fmt::format("the request has {} images; at most {} are allowed "
                                            "(--max-images-per-request)",
                                            urls.size(), options.max_images_per_request));
    std::vector<std::shared_ptr<const ImagePatches>> out;
    for (size_t i = 0; i < urls.size(); ++i) {
        auto fail = [&](const Status& s) {
            return invalid_argument(fmt::format("image {} of the request: {}", i + 1, s.message()));
        };
        auto bytes = fetch_image_bytes(urls[i], options);
        if (!bytes.is_ok()) return fail(bytes.status());
        if (sniff_image_format(bytes.value()) == ImageFormat::kUnknown)
            return fail(invalid_argument("unsupported image format (JPEG, PNG and WebP are supported)"));
        DecodeLimits limits;
        limits.max_pixels = options.max_image_pixels;
        auto rgb = decode_image(bytes.value(), limits);
        if (!rgb.is_ok()) return fail(rgb.status());
        auto patches = preprocess_image(rgb.value(), processor);
        if (!patches.is_ok()) return fail(patches.status());
        out.push_back(std::make_shared<const ImagePatches>(std::move(patches).value()));
    }
    return out;
}

Status expand_image_pads(std::vector<int32_t>& ids, int32_t image_token_id,
                         const std::vector<std::shared_ptr<const ImagePatches>>& images, int merge_size) {
    size_t found = 0;
    for (int32_t t : ids) found += t == image_token_id;
    if (found != images.size())
        return invalid_argument(fmt::format("the prompt has {} image placeholders for {} images", found, images.size()));
    if (images.empty()) return Status::ok();
    std::vector<int32_t> out;
    size_t next = 0;
    for (int32_t t : ids) {
        if (t != image_token_id) {
            out.push_back(t);
            continue;
        }
        out.insert(out.end(), size_t(images[next++]->merged_tokens(merge_size)), image_token_id);
    }
    ids = std::move(out);
    return Status::ok();
}

Status expand_media_pads(std::vector<int32_t>& ids, const VisionInput& vision, const std::vector<PromptMedia>& media) {
    size_t found = 0;
    for (int32_t t : ids) found += t == vision.image_token_id || t == vision.video_token_id;
    if (found != media.size())
        return invalid_argument(fmt::format("the prompt has {} image and video placeholders for {} images and videos",
                                            found, media.size()));
    if (media.empty()) return Status::ok();
    const int m = vision.processor.merge_size;
    std::vector<int32_t> out;
    size_t next = 0;
    for (int32_t t : ids) {
        if (t != vision.image_token_id && t != vision.video_token_id) {
            out.push_back(t);
            continue;
        }
        const PromptMedia& pm = media[next++];
        const ImagePatches& p = *pm.patches;
        if (p.video != (t == vision.video_token_id))
            return invalid_argument(fmt::format("placeholder {} of the prompt is an {} pad but media {} is an {}", next,
                                                t == vision.video_token_id ? "video" : "image", next,
                                                p.video ? "video" : "image"));
        if (!p.video) {
            out.insert(out.end(), size_t(p.merged_tokens(m)), t);
            continue;
        }
        if (pm.frame_prefix.size() != size_t(p.grid_t))
            return invalid_argument(fmt::format("video {} has {} timestamps for {} temporal patches", next,
                                                pm.frame_prefix.size(), p.grid_t));
        const size_t per_frame = size_t(p.grid_h / m) * size_t(p.grid_w / m);
        for (int f = 0; f < p.grid_t; ++f) {
            out.insert(out.end(), pm.frame_prefix[size_t(f)].begin(), pm.frame_prefix[size_t(f)].end());
            out.push_back(vision.vision_start_token_id);
            out.insert(out.end(), per_frame, t);
            out.push_back(vision.vision_end_token_id);
        }
    }
    ids = std::move(out);
    return Status::ok();
}

}  // namespace qs

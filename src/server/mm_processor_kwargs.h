// vLLM's per-request `mm_processor_kwargs`: the keys that map to transformers 5.17's processor
// parameters for Qwen3.5/3.6, applied to copies of the model's processor configs for one request.
//   fps, num_frames     video files: frames sampled per second of video, or a fixed count (one or
//                       the other, as Qwen3VLVideoProcessor.sample_frames requires)
//   do_sample_frames    video files: false takes every frame (then --max-video-frames bounds them)
//   min_pixels,         images: the smart_resize pixel bounds (Qwen2VLImageProcessor's kwargs of
//   max_pixels          those names; the video processor does not read them)
// Frame lists (data:video/jpeg;base64,f1,f2,...) are used as given, as vLLM and transformers use
// them, so the video keys do not change them. Any other key is kUnsupported, a value of the wrong
// type or range kInvalidArgument, naming it. Any thread; no shared state.
#pragma once

#include <cstdint>
#include <optional>

#include <nlohmann/json.hpp>

#include "core/status.h"
#include "image/image_processor.h"
#include "image/video_processor.h"

namespace qs {

struct MediaKwargs {
    std::optional<double> fps;
    std::optional<int64_t> num_frames;
    std::optional<bool> do_sample_frames;
    std::optional<int64_t> min_pixels, max_pixels;
    bool operator==(const MediaKwargs&) const = default;
};

// `v` is the request's mm_processor_kwargs value (an object; null means none).
Result<MediaKwargs> parse_mm_processor_kwargs(const nlohmann::json& v);

// The image processor with min_pixels/max_pixels applied (min must stay <= max).
Result<ImageProcessorConfig> apply_media_kwargs(const MediaKwargs& k, ImageProcessorConfig c);
// The video processor with do_sample_frames applied (fps and num_frames go to the frame sampler,
// server/video_input's load_video).
VideoProcessorConfig apply_media_kwargs(const MediaKwargs& k, VideoProcessorConfig c);

}  // namespace qs

// vLLM's mm_processor_kwargs (see mm_processor_kwargs.h).
#include "server/mm_processor_kwargs.h"

#include <fmt/format.h>

namespace qs {

Result<MediaKwargs> parse_mm_processor_kwargs(const nlohmann::json& v) {
    MediaKwargs k;
    if (v.is_null()) return k;
    if (!v.is_object()) return invalid_argument("'mm_processor_kwargs' must be an object");
    auto count = [](const nlohmann::json& x, const std::string& key) -> Result<int64_t> {
        if (!x.is_number_integer() || x.get<int64_t>() < 1)
            return invalid_argument(fmt::format("mm_processor_kwargs '{}' must be an integer >= 1", key));
        return x.get<int64_t>();
    };
    for (auto it = v.begin(); it != v.end(); ++it) {
        const std::string& key = it.key();
        const nlohmann::json& x = it.value();
        if (x.is_null()) continue;
        if (key == "fps") {
            if (!x.is_number() || !(x.get<double>() > 0))
                return invalid_argument("mm_processor_kwargs 'fps' must be a positive number");
            k.fps = x.get<double>();
        } else if (key == "num_frames") {
            QS_ASSIGN_OR_RETURN(k.num_frames, count(x, key));
        } else if (key == "do_sample_frames") {
            if (!x.is_boolean()) return invalid_argument("mm_processor_kwargs 'do_sample_frames' must be a boolean");
            k.do_sample_frames = x.get<bool>();
        } else if (key == "min_pixels") {
            QS_ASSIGN_OR_RETURN(k.min_pixels, count(x, key));
        } else if (key == "max_pixels") {
            QS_ASSIGN_OR_RETURN(k.max_pixels, count(x, key));
        } else {
            return unsupported(fmt::format("mm_processor_kwargs '{}' is not supported (supported: fps, num_frames, "
                                                "do_sample_frames, min_pixels, max_pixels)", key));
        }
    }
    if (k.fps && k.num_frames)
        return invalid_argument("mm_processor_kwargs 'fps' and 'num_frames' are mutually exclusive");
    return k;
}

Result<ImageProcessorConfig> apply_media_kwargs(const MediaKwargs& k, ImageProcessorConfig c) {
    if (k.min_pixels) c.min_pixels = *k.min_pixels;
    if (k.max_pixels) c.max_pixels = *k.max_pixels;
    if (c.min_pixels > c.max_pixels)
        return invalid_argument(fmt::format("mm_processor_kwargs: min_pixels {} exceeds max_pixels {}", c.min_pixels,
                                            c.max_pixels));
    return c;
}

VideoProcessorConfig apply_media_kwargs(const MediaKwargs& k, VideoProcessorConfig c) {
    if (k.do_sample_frames) c.do_sample_frames = *k.do_sample_frames;
    return c;
}

}  // namespace qs

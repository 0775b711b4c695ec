// Chat request videos: frame lists → patches and timestamps (see video_input.h).
#include "server/video_input.h"

#include <algorithm>
#include <cctype>
#include <numeric>

#include <fmt/format.h>

#include "image/image_decode.h"
#include "image/video_decode.h"

namespace qs {

namespace {

std::string lower(std::string s) {
    std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return char(std::tolower(c)); });
    return s;
}

// A video file (mp4, webm, mkv, ...): its bytes from any source, decoded with the processor's frame
// sampling (transformers samples a decoded video by its container's frame count and rate), the
// timestamps from the sampled indices and the container's frame rate (Qwen3VLProcessor's).
Result<LoadedVideo> load_video_file(const std::string& url, const ImageInputOptions& options,
                                    const VideoProcessorConfig& processor, const MediaKwargs& kwargs) {
    if (!video_files_supported()) return decode_video({}, {}, {}).status();  // the "needs libavcodec" 400
    QS_ASSIGN_OR_RETURN(const std::string bytes, fetch_video_bytes(url, options));
    VideoDecodeLimits limits;
    limits.max_pixels = options.max_image_pixels;
    limits.max_frames = options.max_video_frames;
    const PickFrames pick = [&](const VideoStreamInfo& info) -> Result<std::vector<int64_t>> {
        if (!processor.do_sample_frames) {
            std::vector<int64_t> all(size_t(info.total_frames));
            std::iota(all.begin(), all.end(), 0);
            return all;
        }
        return sample_frame_indices(info.total_frames, info.fps, kwargs.num_frames, kwargs.fps, processor);
    };
    QS_ASSIGN_OR_RETURN(DecodedVideo v, decode_video(bytes, pick, limits));
    auto patches = preprocess_video(v.frames, processor);
    if (!patches.is_ok()) return patches.status();
    LoadedVideo out;
    // transformers takes 24 frames per second when the container gives no rate.
    out.timestamps = frame_timestamps(v.indices, v.info.fps > 0 ? v.info.fps : 24.0,
                                      processor.image.temporal_patch_size);
    out.patches = std::make_shared<const ImagePatches>(std::move(patches).value());
    return out;
}

}  // namespace

Result<LoadedVideo> load_video(const std::string& url, const ImageInputOptions& options,
                               const VideoProcessorConfig& processor, const MediaKwargs& kwargs) {
    if (url.rfind("data:", 0) != 0) return load_video_file(url, options, processor, kwargs);
    const size_t comma = url.find(',');
    if (comma == std::string::npos) return invalid_argument("the data: URL has no ',' before its data");
    const std::string meta = lower(url.substr(5, comma - 5));  // video/jpeg;base64
    if (meta.size() < 7 || meta.compare(meta.size() - 7, 7, ";base64") != 0)
        return invalid_argument("the data: URL must be base64 (data:video/jpeg;base64,<frame>,<frame>,...)");
    const std::string type = meta.substr(0, meta.size() - 7);
    if (type.rfind("video/", 0) != 0)
        return invalid_argument(fmt::format("the data: URL's media type '{}' is not a video type (a frame list is "
                                            "data:video/jpeg;base64,<frame>,<frame>,...)", type));
    if (type != "video/jpeg") return load_video_file(url, options, processor, kwargs);
    // The frames: split on ',' (base64 has no commas), counted before any is decoded.
    const std::string_view data(url.data() + comma + 1, url.size() - comma - 1);
    const int64_t count = int64_t(std::count(data.begin(), data.end(), ',')) + 1;
    if (count > options.max_video_frames)
        return invalid_argument(fmt::format("the video has {} frames; at most {} are allowed (--max-video-frames)",
                                            count, options.max_video_frames));
    std::vector<RgbImage> frames;
    size_t from = 0;
    for (int64_t k = 0; k < count; ++k) {
        const size_t to = std::min(data.find(',', from), data.size());
        const std::string_view b64 = data.substr(from, to - from);
        from = to + 1;
        auto fail = [&](const std::string& m) { return invalid_argument(fmt::format("frame {}: {}", k + 1, m)); };
        if (int64_t(b64.size()) / 4 * 3 > options.max_image_bytes)
            return fail(fmt::format("larger than --max-image-bytes ({} bytes)", options.max_image_bytes));
        auto bytes = base64_decode(b64);
        if (!bytes.is_ok()) return fail("not valid base64: " + bytes.status().message());
        if (sniff_image_format(bytes.value()) == ImageFormat::kUnknown)
            return fail("unsupported image format (JPEG, PNG and WebP frames are supported)");
        DecodeLimits limits;
        limits.max_pixels = options.max_image_pixels;
        auto rgb = decode_image(bytes.value(), limits);
        if (!rgb.is_ok()) return fail(rgb.status().message());
        frames.push_back(std::move(rgb).value());
    }
    auto patches = preprocess_video(frames, processor);
    if (!patches.is_ok()) return patches.status();
    LoadedVideo out;
    std::vector<int64_t> indices(frames.size());
    std::iota(indices.begin(), indices.end(), 0);
    out.timestamps = frame_timestamps(indices, options.video_frame_list_fps, processor.image.temporal_patch_size);
    out.patches = std::make_shared<const ImagePatches>(std::move(patches).value());
    return out;
}

}  // namespace qs

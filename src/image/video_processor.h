// The Qwen3-VL video processor of transformers 5.17 (Qwen3VLVideoProcessor, which Qwen3.5/3.6
// checkpoints use for videos), reproduced on decoded frames: frame sampling (sample_frame_indices:
// `fps` frames per second of video, or `num_frames`, clamped to [min_frames, max_frames] and the
// frame count, spread by np.linspace and rounded half to even), the video smart_resize (the pixel
// budget covers all frames: t_bar·h·w within [min_pixels, max_pixels]), resize of every frame,
// rescale and normalise fused as its torchvision backend does ((float(v) - mean/scale) /
// (std/scale) in float32), the frame count padded to a multiple of temporal_patch_size by
// repeating the last frame, and the patch rows ordered (temporal patch, merge block row, merge
// block column, row in block, column in block), each row (channel, frame in patch, patch row,
// patch column). The timestamps Qwen3VLProcessor writes before each temporal patch
// ("<1.5 seconds>") come from frame_timestamps. Differences: the resize is Pillow's bicubic
// (image/resample), where transformers' video path uses torchvision's antialiased bicubic (a few
// levels apart, docs/VISION.md); frames already at their smart_resize size are exact. The
// per-frame pixel cap (cap_pixels_per_frame, off by default in 5.17) is not implemented. Any
// thread; no shared state.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/status.h"
#include "image/image.h"
#include "image/image_processor.h"

namespace qs {

// video_preprocessor_config.json of the checkpoint. Defaults are Qwen3VLVideoProcessor's class
// defaults, used when a checkpoint has no such file.
struct VideoProcessorConfig {
    ImageProcessorConfig image;  // size, patch, temporal patch, merge, rescale, mean, std
    double fps = 2.0;            // frames sampled per second of video
    int64_t min_frames = 4, max_frames = 768;
    bool do_sample_frames = true;

    VideoProcessorConfig() {
        image.min_pixels = 128 * 32 * 32;  // size.shortest_edge
        image.max_pixels = 32 * 32 * 768;  // size.longest_edge
    }
};

Result<VideoProcessorConfig> parse_video_processor_config(const std::string& json_text);
// Reads DIR/video_preprocessor_config.json; the defaults above when the file does not exist.
Result<VideoProcessorConfig> load_video_processor_config(const std::string& model_dir);

// Qwen3VLVideoProcessor.sample_frames: indices of the frames to keep out of `total_frames`.
// `fps` (frames per second to sample; the config's when neither it nor num_frames is given) needs
// the video's frame rate (`video_fps`; 24 when unknown, as transformers assumes). Giving both fps
// and num_frames is kInvalidArgument.
Result<std::vector<int64_t>> sample_frame_indices(int64_t total_frames, std::optional<double> video_fps,
                                                  std::optional<int64_t> num_frames, std::optional<double> fps,
                                                  const VideoProcessorConfig& cfg);

// The video smart_resize (transformers.models.qwen3_vl): fewer than temporal_factor frames or an
// aspect ratio above 200 is kInvalidArgument.
Result<ResizedSize> smart_resize_video(int64_t num_frames, int height, int width, int temporal_factor, int factor,
                                       int64_t min_pixels, int64_t max_pixels);

// Qwen3VLProcessor._calculate_timestamps: the indices padded to a multiple of `temporal_patch`
// with the last one, each index / video_fps seconds, the mean of each patch's first and last.
std::vector<double> frame_timestamps(std::vector<int64_t> indices, double video_fps, int temporal_patch);
// "<1.5 seconds>": Python's f"<{t:.1f} seconds>".
std::string timestamp_text(double seconds);

// All frames must have the same size; the result has video = true and grid_t = frames padded to
// temporal_patch_size, divided by it.
Result<ImagePatches> preprocess_video(const std::vector<RgbImage>& frames, const VideoProcessorConfig& cfg);

}  // namespace qs

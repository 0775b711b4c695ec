// A chat request's videos: a video_url part's URL → frames → patches (image/video_processor), and
// the timestamps Qwen3VLProcessor writes before each temporal patch. The form taken is vLLM's
// frame list, `data:video/jpeg;base64,<frame>,<frame>,...` (each frame a base64 JPEG, PNG or WebP;
// the frames are used as given, no sampling, and are taken to be --video-frame-list-fps apart, 1
// per second by default as in vLLM). The frame count is checked before anything is decoded
// (--max-video-frames), each frame's bytes and pixels as an image's. Any other video_url is a video
// file (data:video/mp4;base64,..., webm, mkv, a local file or an http(s):// URL under the same
// options as images, within --max-video-bytes): decoded by image/video_decode with the processor's
// fps sampling (at most --max-video-frames sampled, --max-image-pixels per frame), its timestamps
// from the container's frame rate; a build without libavcodec refuses it with a 400 saying so.
// Errors are kInvalidArgument naming the video and frame. Worker threads; no shared state.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "core/status.h"
#include "image/image_processor.h"
#include "image/video_processor.h"
#include "server/image_fetch.h"
#include "server/mm_processor_kwargs.h"

namespace qs {

struct LoadedVideo {
    std::shared_ptr<const ImagePatches> patches;  // video = true
    std::vector<double> timestamps;               // seconds, one per temporal patch
};

// `kwargs`: the request's mm_processor_kwargs; fps or num_frames replace the processor's fps in
// a video file's frame sampling (a frame list is used as given).
Result<LoadedVideo> load_video(const std::string& url, const ImageInputOptions& options,
                               const VideoProcessorConfig& processor, const MediaKwargs& kwargs = {});

}  // namespace qs

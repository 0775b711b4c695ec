// Video files (mp4, webm, mkv, ... whatever this build's libavformat/libavcodec read) decoded to
// RGB frames, from bytes in memory. The container's stream metadata gives what the processor's
// frame sampling needs, as PyAV reports it to transformers (transformers.video_utils, the pyav
// reader): the frame rate (the stream's average frame rate) and the frame count (the stream's
// nb_frames; when the container does not store it, as webm and mkv, every packet is counted).
// The caller picks the frame indices from that (image/video_processor's sample_frame_indices);
// frames are decoded in order and only the picked ones are converted to RGB, as PyAV's
// to_ndarray(format="rgb24") does (libswscale, bilinear flags, the frame's own colour matrix
// and range). Limits (pixels per frame, picked frames) are checked from the stream header before
// decoding. Built only with QS_HAVE_LIBAV (CMake finds libavformat-dev & co.); without it
// video_files_supported() is false and decode_video refuses. Errors are kInvalidArgument naming
// the problem. Any thread; no shared state.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "image/image.h"

namespace qs {

struct VideoStreamInfo {
    int64_t total_frames = 0;  // frames in the stream
    double fps = 0;            // average frame rate; 0 when the container has none
    int width = 0, height = 0;
    std::string container, codec;  // e.g. "mov,mp4,m4a,3gp,3g2,mj2", "h264"
};

struct VideoDecodeLimits {
    int64_t max_pixels = 1 << 24;  // width × height of one frame
    int64_t max_frames = 32;       // frames picked (decoded ones are not kept)
};

struct DecodedVideo {
    VideoStreamInfo info;
    std::vector<int64_t> indices;  // the picked frames, ascending
    std::vector<RgbImage> frames;  // one per index
};

using PickFrames = std::function<Result<std::vector<int64_t>>(const VideoStreamInfo&)>;

// True when this build links libavcodec (QS_HAVE_LIBAV).
bool video_files_supported();

// Decodes `bytes` (a whole video file). `pick` gets the stream info and returns the frame indices
// to keep (each in [0, total_frames), ascending); a picked frame the stream turns out not to have
// is an error. The first video stream is used; audio and other streams are ignored.
Result<DecodedVideo> decode_video(std::string_view bytes, const PickFrames& pick, const VideoDecodeLimits& limits);

}  // namespace qs

// The bytes behind an OpenAI `image_url` or `video_url`: a data: URL (base64, any image/* or
// video/* type; the decoder sniffs the real format), a local file (a path or file:// URL) only
// under --allowed-local-media-path, an http:// or https:// URL only with --allow-remote-images
// (server/remote_fetch: size and time limited, https certificates verified). Every refusal is
// kInvalidArgument and says what was wrong and which option allows it. Called on the worker
// threads; no shared state.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "core/status.h"

namespace qs {

struct ImageInputOptions {
    std::string allowed_local_media_path;   // empty: local files refused
    bool allow_remote_images = false;       // http:// URLs
    int64_t max_image_bytes = 20 << 20;     // encoded bytes per image (any source)
    int64_t max_image_pixels = 1 << 24;     // width × height before resizing (checked from the header)
    int64_t max_images_per_request = 8;     // image_url and video_url parts together
    int64_t max_video_frames = 32;          // frames in one video (a frame list, or sampled from a file)
    int64_t max_video_bytes = 64 << 20;     // encoded bytes of one video file (any source)
    double video_frame_list_fps = 1.0;      // frame rate a frame list is taken to have (timestamps)
    double remote_timeout_s = 10.0;         // connect + request + response of one http(s):// fetch
    std::string remote_ca_file;             // PEM CA bundle for https (empty: the system's CA store)
};

// Standard base64 (RFC 4648, padding optional, no whitespace). Error names the bad character.
Result<std::string> base64_decode(std::string_view in);

Result<std::string> fetch_image_bytes(const std::string& url, const ImageInputOptions& options);
// A video file's bytes: data:video/...;base64, a file or a URL, within max_video_bytes.
Result<std::string> fetch_video_bytes(const std::string& url, const ImageInputOptions& options);

}  // namespace qs

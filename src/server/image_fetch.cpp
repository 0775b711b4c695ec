// Image and video bytes from data:, file, http:// and https:// URLs (see image_fetch.h).
#include "server/image_fetch.h"

#include "server/remote_fetch.h"

#include <fmt/format.h>

#include <filesystem>
#include <fstream>
#include <iterator>

namespace qs {

namespace {

namespace fs = std::filesystem;

int base64_value(char c) {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
}

// What is being fetched: the noun in messages, the data: media type, the byte limit and its option.
struct Kind {
    const char* noun;         // "image", "video"
    const char* mime_prefix;  // "image/", "video/"
    int64_t max_bytes;
    const char* bytes_option;  // "--max-image-bytes"
};

Status too_large(const Kind& k) {
    return invalid_argument(fmt::format("the {} is larger than {} ({} bytes)", k.noun, k.bytes_option, k.max_bytes));
}

Result<std::string> from_data_url(const std::string& url, const Kind& k) {
    const size_t comma = url.find(',');
    if (comma == std::string::npos) return invalid_argument("the data: URL has no ',' before its data");
    const std::string meta = url.substr(5, comma - 5);  // e.g. image/png;base64
    if (meta.size() < 7 || meta.compare(meta.size() - 7, 7, ";base64") != 0)
        return invalid_argument(fmt::format("the data: URL must be base64 (data:{}...;base64,...)", k.mime_prefix));
    if (meta.rfind(k.mime_prefix, 0) != 0)
        return invalid_argument(fmt::format("the data: URL's media type '{}' is not an {} type",
                                            meta.substr(0, meta.size() - 7), k.noun));
    const std::string_view data(url.data() + comma + 1, url.size() - comma - 1);
    if (int64_t(data.size()) / 4 * 3 > k.max_bytes) return too_large(k);
    auto bytes = base64_decode(data);
    if (!bytes.is_ok()) return invalid_argument("the data: URL is not valid base64: " + bytes.status().message());
    return bytes;
}

Result<std::string> from_file(const std::string& path_in, const ImageInputOptions& o, const Kind& k) {
    if (o.allowed_local_media_path.empty())
        return invalid_argument(fmt::format("local {} files are not allowed (start the server with "
                                            "--allowed-local-media-path DIR to allow files under DIR)", k.noun));
    std::error_code ec;
    const fs::path root = fs::weakly_canonical(o.allowed_local_media_path, ec);
    const fs::path path = fs::weakly_canonical(path_in, ec);
    if (ec || !fs::is_regular_file(path, ec))
        return invalid_argument(fmt::format("the {} file '{}' does not exist or is not a file", k.noun, path_in));
    // The resolved path (symbolic links followed) must lie under the allowed directory.
    const fs::path rel = path.lexically_relative(root);
    if (rel.empty() || *rel.begin() == "..")
        return invalid_argument(fmt::format("the {} file '{}' is outside --allowed-local-media-path", k.noun, path_in));
    if (int64_t(fs::file_size(path, ec)) > k.max_bytes) return too_large(k);
    std::ifstream f(path, std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    if (!f && !f.eof()) return invalid_argument(fmt::format("the {} file '{}' cannot be read", k.noun, path_in));
    return bytes;
}

}  // namespace

Result<std::string> base64_decode(std::string_view in) {
    while (!in.empty() && in.back() == '=') in.remove_suffix(1);
    std::string out;
    out.reserve(in.size() / 4 * 3 + 3);
    uint32_t acc = 0;
    int bits = 0;
    for (size_t i = 0; i < in.size(); ++i) {
        const int v = base64_value(in[i]);
        if (v < 0) return invalid_argument(fmt::format("character {} (byte {}) is not base64", i, int(uint8_t(in[i]))));
        acc = (acc << 6) | uint32_t(v);
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            out.push_back(char((acc >> bits) & 0xff));
        }
    }
    if (in.size() % 4 == 1) return invalid_argument("the base64 data is truncated");
    return out;
}

namespace {

Result<std::string> fetch(const std::string& url, const ImageInputOptions& options, const Kind& k) {
    if (url.rfind("data:", 0) == 0) return from_data_url(url, k);
    if (url.rfind("http://", 0) == 0 || url.rfind("https://", 0) == 0) {
        if (!options.allow_remote_images)
            return invalid_argument(fmt::format("remote {} URLs are not allowed (start the server with "
                                                "--allow-remote-images)", k.noun));
        RemoteFetchLimits limits;
        limits.max_bytes = k.max_bytes;
        limits.timeout_s = options.remote_timeout_s;
        limits.ca_file = options.remote_ca_file;
        auto r = fetch_remote(url, limits);
        if (!r.is_ok() && r.status().message() == kRemoteTooLarge) return too_large(k);
        if (!r.is_ok())
            return invalid_argument(fmt::format("the {} URL '{}': {}", k.noun, url, r.status().message()));
        return r;
    }
    if (url.rfind("file://", 0) == 0) return from_file(url.substr(7), options, k);
    if (!url.empty() && url[0] == '/') return from_file(url, options, k);
    return invalid_argument(fmt::format("the {} URL must be a data: URL, an http:// or https:// URL or a local file path",
                                        k.noun));
}

}  // namespace

Result<std::string> fetch_image_bytes(const std::string& url, const ImageInputOptions& options) {
    return fetch(url, options, Kind{"image", "image/", options.max_image_bytes, "--max-image-bytes"});
}

Result<std::string> fetch_video_bytes(const std::string& url, const ImageInputOptions& options) {
    return fetch(url, options, Kind{"video", "video/", options.max_video_bytes, "--max-video-bytes"});
}

}  // namespace qs

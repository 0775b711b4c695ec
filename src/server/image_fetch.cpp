// Image bytes from data:, file and http:// URLs (see image_fetch.h).
#include "server/image_fetch.h"

#include <fmt/format.h>

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <iterator>

namespace qs {

namespace {

namespace beast = boost::beast;
namespace http = beast::http;
namespace net = boost::asio;
namespace fs = std::filesystem;

int base64_value(char c) {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
}

Status too_large(int64_t limit) {
    return invalid_argument(fmt::format("the image is larger than --max-image-bytes ({} bytes)", limit));
}

Result<std::string> from_data_url(const std::string& url, const ImageInputOptions& o) {
    const size_t comma = url.find(',');
    if (comma == std::string::npos) return invalid_argument("the data: URL has no ',' before its data");
    const std::string meta = url.substr(5, comma - 5);  // e.g. image/png;base64
    if (meta.size() < 7 || meta.compare(meta.size() - 7, 7, ";base64") != 0)
        return invalid_argument("the data: URL must be base64 (data:image/...;base64,...)");
    if (meta.rfind("image/", 0) != 0)
        return invalid_argument(fmt::format("the data: URL's media type '{}' is not an image type",
                                            meta.substr(0, meta.size() - 7)));
    const std::string_view data(url.data() + comma + 1, url.size() - comma - 1);
    if (int64_t(data.size()) / 4 * 3 > o.max_image_bytes) return too_large(o.max_image_bytes);
    auto bytes = base64_decode(data);
    if (!bytes.is_ok()) return invalid_argument("the data: URL is not valid base64: " + bytes.status().message());
    return bytes;
}

Result<std::string> from_file(const std::string& path_in, const ImageInputOptions& o) {
    if (o.allowed_local_media_path.empty())
        return invalid_argument("local image files are not allowed (start the server with "
                                "--allowed-local-media-path DIR to allow files under DIR)");
    std::error_code ec;
    const fs::path root = fs::weakly_canonical(o.allowed_local_media_path, ec);
    const fs::path path = fs::weakly_canonical(path_in, ec);
    if (ec || !fs::is_regular_file(path, ec))
        return invalid_argument(fmt::format("the image file '{}' does not exist or is not a file", path_in));
    // The resolved path (symbolic links followed) must lie under the allowed directory.
    const fs::path rel = path.lexically_relative(root);
    if (rel.empty() || *rel.begin() == "..")
        return invalid_argument(fmt::format("the image file '{}' is outside --allowed-local-media-path", path_in));
    if (int64_t(fs::file_size(path, ec)) > o.max_image_bytes) return too_large(o.max_image_bytes);
    std::ifstream f(path, std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    if (!f && !f.eof()) return invalid_argument(fmt::format("the image file '{}' cannot be read", path_in));
    return bytes;
}

Result<std::string> from_http(const std::string& url, const ImageInputOptions& o) {
    if (!o.allow_remote_images)
        return invalid_argument("remote image URLs are not allowed (start the server with --allow-remote-images)");
    // http://host[:port][/target]
    const std::string rest = url.substr(7);
    const size_t slash = rest.find('/');
    const std::string authority = rest.substr(0, slash);
    const std::string target = slash == std::string::npos ? "/" : rest.substr(slash);
    std::string host = authority, port = "80";
    if (const size_t colon = authority.rfind(':'); colon != std::string::npos && authority.find(']') == std::string::npos) {
        host = authority.substr(0, colon);
        port = authority.substr(colon + 1);
    }
    if (host.empty()) return invalid_argument(fmt::format("the image URL '{}' has no host", url));
    net::io_context ioc;
    net::ip::tcp::resolver resolver(ioc);
    beast::tcp_stream stream(ioc);
    http::request<http::empty_body> req{http::verb::get, target, 11};
    req.set(http::field::host, authority);
    req.set(http::field::user_agent, "qwenserve");
    http::response_parser<http::string_body> parser;
    parser.body_limit(uint64_t(o.max_image_bytes));
    beast::flat_buffer buffer;
    beast::error_code result;
    const auto timeout = std::chrono::duration_cast<std::chrono::steady_clock::duration>(
        std::chrono::duration<double>(o.remote_timeout_s));
    stream.expires_after(timeout);
    resolver.async_resolve(host, port, [&](beast::error_code ec, net::ip::tcp::resolver::results_type hosts) {
        if (ec) return void(result = ec);
        stream.async_connect(hosts, [&](beast::error_code ec2, const net::ip::tcp::endpoint&) {
            if (ec2) return void(result = ec2);
            http::async_write(stream, req, [&](beast::error_code ec3, size_t) {
                if (ec3) return void(result = ec3);
                http::async_read(stream, buffer, parser, [&](beast::error_code ec4, size_t) { result = ec4; });
            });
        });
    });
    // The resolver is not covered by the stream's timer: bound the whole fetch as well.
    ioc.run_for(timeout + std::chrono::seconds(1));
    if (!ioc.stopped()) return invalid_argument(fmt::format("fetching the image URL '{}' timed out", url));
    if (result == http::error::body_limit) return too_large(o.max_image_bytes);
    if (result == beast::error::timeout)
        return invalid_argument(fmt::format("fetching the image URL '{}' timed out after {} s", url, o.remote_timeout_s));
    if (result)
        return invalid_argument(fmt::format("the image URL '{}' is unreachable: {}", url, result.message()));
    const auto& res = parser.get();
    if (res.result_int() != 200)
        return invalid_argument(fmt::format("the image URL '{}' answered HTTP {}", url, res.result_int()));
    return res.body();
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

Result<std::string> fetch_image_bytes(const std::string& url, const ImageInputOptions& options) {
    if (url.rfind("data:", 0) == 0) return from_data_url(url, options);
    if (url.rfind("http://", 0) == 0) return from_http(url, options);
    if (url.rfind("https://", 0) == 0)
        return invalid_argument("https image URLs are not supported (no TLS in this server); send the image as a "
                                "data: URL or fetch it over http:// with --allow-remote-images");
    if (url.rfind("file://", 0) == 0) return from_file(url.substr(7), options);
    if (!url.empty() && url[0] == '/') return from_file(url, options);
    return invalid_argument("the image URL must be a data: URL, an http:// URL or a local file path");
}

}  // namespace qs

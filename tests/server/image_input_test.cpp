// Image inputs of chat requests (server/image_fetch, server/image_input): base64 against Python's
// base64 module's encodings of fixed bytes, data: URL checks, local files only under the allowed
// directory, http:// only when allowed (a loopback server: served, 404, unreachable, too large),
// the pixel and count limits, and the expansion of one <|image_pad|> per image.
#include <gtest/gtest.h>

#include <boost/asio.hpp>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "../common/test_files.h"
#include "image/image_processor.h"
#include "server/image_input.h"

using namespace qs;

namespace {

const std::string kImages = std::string(QS_SOURCE_DIR) + "/tests/data/image";

// One-shot loopback HTTP server: answers each connection with `response` (raw bytes).
class OneShotHttp {
public:
    explicit OneShotHttp(std::string response) : acceptor_(ioc_, {boost::asio::ip::make_address("127.0.0.1"), 0}) {
        thread_ = std::thread([this, r = std::move(response)] {
            boost::asio::ip::tcp::socket s(ioc_);
            boost::system::error_code ec;
            acceptor_.accept(s, ec);
            if (ec) return;
            char buf[4096];
            s.read_some(boost::asio::buffer(buf), ec);
            boost::asio::write(s, boost::asio::buffer(r), ec);
            s.shutdown(boost::asio::ip::tcp::socket::shutdown_both, ec);
        });
    }
    ~OneShotHttp() {
        boost::system::error_code ec;
        acceptor_.close(ec);
        thread_.join();
    }
    int port() const { return acceptor_.local_endpoint().port(); }

private:
    boost::asio::io_context ioc_;
    boost::asio::ip::tcp::acceptor acceptor_;
    std::thread thread_;
};

std::string http_ok(const std::string& body) {
    return "HTTP/1.1 200 OK\r\nContent-Type: image/png\r\nContent-Length: " + std::to_string(body.size()) +
           "\r\nConnection: close\r\n\r\n" + body;
}

}  // namespace

TEST(Base64, DecodesPythonEncodings) {
    // base64.b64encode(b"...") in Python 3.
    EXPECT_EQ(base64_decode("").value(), "");
    EXPECT_EQ(base64_decode("YQ==").value(), "a");
    EXPECT_EQ(base64_decode("YWI=").value(), "ab");
    EXPECT_EQ(base64_decode("YWJj").value(), "abc");
    EXPECT_EQ(base64_decode("AP8Q7w==").value(), std::string("\x00\xff\x10\xef", 4));
    EXPECT_EQ(base64_decode("aGVsbG8gd29ybGQ").value(), "hello world");  // padding optional
    auto bad = base64_decode("YW!j");
    ASSERT_FALSE(bad.is_ok());
    EXPECT_NE(bad.status().message().find("character 2"), std::string::npos) << bad.status().message();
    EXPECT_FALSE(base64_decode("YWJjZ").is_ok());  // a lone sextet
}

TEST(ImageFetch, DataUrls) {
    ImageInputOptions o;
    EXPECT_EQ(fetch_image_bytes("data:image/png;base64,YWJj", o).value(), "abc");
    auto r = fetch_image_bytes("data:text/plain;base64,YWJj", o);
    ASSERT_FALSE(r.is_ok());
    EXPECT_NE(r.status().message().find("not an image type"), std::string::npos);
    EXPECT_FALSE(fetch_image_bytes("data:image/png,abc", o).is_ok());  // not base64
    o.max_image_bytes = 2;
    r = fetch_image_bytes("data:image/png;base64,YWJjYWJj", o);
    ASSERT_FALSE(r.is_ok());
    EXPECT_NE(r.status().message().find("--max-image-bytes"), std::string::npos);
    EXPECT_FALSE(fetch_image_bytes("ftp://x/y.png", o).is_ok());
}

TEST(ImageFetch, LocalFilesOnlyUnderTheAllowedDirectory) {
    ImageInputOptions o;
    const std::string png = kImages + "/rgb_97x61.png";
    auto r = fetch_image_bytes(png, o);
    ASSERT_FALSE(r.is_ok());
    EXPECT_NE(r.status().message().find("--allowed-local-media-path"), std::string::npos);
    o.allowed_local_media_path = kImages;
    EXPECT_EQ(fetch_image_bytes(png, o).value(), qs::test::read_fixture(png));
    EXPECT_EQ(fetch_image_bytes("file://" + png, o).value(), qs::test::read_fixture(png));
    r = fetch_image_bytes(kImages + "/../vision/config.json", o);  // .. leaves the directory
    ASSERT_FALSE(r.is_ok());
    EXPECT_NE(r.status().message().find("outside"), std::string::npos) << r.status().message();
    // A symbolic link inside the directory that points outside it.
    const auto dir = std::filesystem::temp_directory_path() / ("qs_img_" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir);
    std::filesystem::create_symlink(kImages + "/../vision/config.json", dir / "link.png");
    o.allowed_local_media_path = dir.string();
    r = fetch_image_bytes((dir / "link.png").string(), o);
    std::filesystem::remove_all(dir);
    ASSERT_FALSE(r.is_ok());
    EXPECT_NE(r.status().message().find("outside"), std::string::npos) << r.status().message();
    EXPECT_FALSE(fetch_image_bytes(kImages + "/missing.png", o).is_ok());
}

TEST(ImageFetch, HttpOnlyWhenAllowedWithinLimits) {
    const std::string png = qs::test::read_fixture(kImages + "/rgb_97x61.png");
    ImageInputOptions o;
    o.remote_timeout_s = 5;
    {
        OneShotHttp srv(http_ok(png));
        const std::string url = "http://127.0.0.1:" + std::to_string(srv.port()) + "/a.png";
        auto r = fetch_image_bytes(url, o);
        ASSERT_FALSE(r.is_ok());
        EXPECT_NE(r.status().message().find("--allow-remote-images"), std::string::npos);
        o.allow_remote_images = true;
        r = fetch_image_bytes(url, o);
        ASSERT_TRUE(r.is_ok()) << r.status().message();
        EXPECT_EQ(r.value(), png);
    }
    {
        OneShotHttp srv("HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
        auto r = fetch_image_bytes("http://127.0.0.1:" + std::to_string(srv.port()) + "/a.png", o);
        ASSERT_FALSE(r.is_ok());
        EXPECT_NE(r.status().message().find("HTTP 404"), std::string::npos) << r.status().message();
    }
    {
        OneShotHttp srv(http_ok(png));
        o.max_image_bytes = 100;
        auto r = fetch_image_bytes("http://127.0.0.1:" + std::to_string(srv.port()) + "/a.png", o);
        ASSERT_FALSE(r.is_ok());
        EXPECT_NE(r.status().message().find("--max-image-bytes"), std::string::npos) << r.status().message();
        o.max_image_bytes = 20 << 20;
    }
    int closed_port = 0;
    {
        OneShotHttp srv("");
        closed_port = srv.port();
        // Connect once so the server thread ends; afterwards nothing listens on the port.
        boost::asio::io_context ioc;
        boost::asio::ip::tcp::socket s(ioc);
        s.connect({boost::asio::ip::make_address("127.0.0.1"), uint16_t(closed_port)});
    }
    auto r = fetch_image_bytes("http://127.0.0.1:" + std::to_string(closed_port) + "/a.png", o);
    ASSERT_FALSE(r.is_ok());
    EXPECT_NE(r.status().message().find("unreachable"), std::string::npos) << r.status().message();
    r = fetch_image_bytes("https://127.0.0.1/a.png", o);
    ASSERT_FALSE(r.is_ok());
    EXPECT_NE(r.status().message().find("https"), std::string::npos);
}

TEST(ImageInput, LoadsDecodesAndChecksLimits) {
    auto proc = load_image_processor_config(kImages);
    ASSERT_TRUE(proc.is_ok()) << proc.status().message();
    ImageInputOptions o;
    o.allowed_local_media_path = kImages;
    auto imgs = load_images({kImages + "/rgb_97x61.png", kImages + "/gray_64x64.jpg"}, o, proc.value());
    ASSERT_TRUE(imgs.is_ok()) << imgs.status().message();
    ASSERT_EQ(imgs->size(), 2u);
    EXPECT_EQ((*imgs)[0]->grid_h, 4);
    EXPECT_EQ((*imgs)[0]->grid_w, 6);
    o.max_image_pixels = 97 * 61 - 1;
    auto r = load_images({kImages + "/gray_64x64.jpg", kImages + "/rgb_97x61.png"}, o, proc.value());
    ASSERT_FALSE(r.is_ok());
    EXPECT_NE(r.status().message().find("image 2"), std::string::npos) << r.status().message();
    EXPECT_NE(r.status().message().find("pixels"), std::string::npos) << r.status().message();
    o.max_image_pixels = 1 << 24;
    o.max_images_per_request = 1;
    r = load_images({kImages + "/gray_64x64.jpg", kImages + "/gray_64x64.jpg"}, o, proc.value());
    ASSERT_FALSE(r.is_ok());
    EXPECT_NE(r.status().message().find("at most 1"), std::string::npos);
    o.max_images_per_request = 8;
    r = load_images({"data:image/gif;base64,R0lGODlhAQABAAAAACw="}, o, proc.value());
    ASSERT_FALSE(r.is_ok());
    EXPECT_NE(r.status().message().find("unsupported image format"), std::string::npos) << r.status().message();
    r = load_images({"data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAA"}, o, proc.value());  // cut PNG
    ASSERT_FALSE(r.is_ok());
    EXPECT_NE(r.status().message().find("PNG"), std::string::npos) << r.status().message();
}

TEST(ImageInput, ExpandsOnePadPerImage) {
    auto a = std::make_shared<ImagePatches>();
    a->grid_t = 1;
    a->grid_h = 4;
    a->grid_w = 6;
    auto b = std::make_shared<ImagePatches>();
    b->grid_t = 1;
    b->grid_h = 4;
    b->grid_w = 4;
    std::vector<std::shared_ptr<const ImagePatches>> imgs = {a, b};
    std::vector<int32_t> ids = {1, 9, 7, 2, 9, 7, 3};
    ASSERT_TRUE(expand_image_pads(ids, 7, imgs, 2).is_ok());
    std::vector<int32_t> want = {1, 9};
    want.insert(want.end(), 6, 7);
    want.insert(want.end(), {2, 9});
    want.insert(want.end(), 4, 7);
    want.push_back(3);
    EXPECT_EQ(ids, want);
    std::vector<int32_t> one = {1, 7, 2};
    EXPECT_FALSE(expand_image_pads(one, 7, imgs, 2).is_ok());
}

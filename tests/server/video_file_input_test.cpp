// server/video_input on video files (tests/data/video_file: PyAV and transformers 5.17, see
// tools/make_video_file_fixture.py): a data:video/mp4 URL and a local file give transformers'
// pixel_values_videos, grid and Qwen3VLProcessor's timestamps; mm_processor_kwargs' num_frames and
// fps change the sampling as sample_frames does (indices from np.linspace, computed here); the
// options' limits and a build without libavcodec are refused naming the problem.
#include <cmath>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "../common/test_files.h"
#include "image/video_decode.h"
#include "io/npy.h"
#include "server/video_input.h"

namespace qs {
namespace {

const std::string kDir = std::string(QS_SOURCE_DIR) + "/tests/data/video_file";

std::string base64(const std::string& in) {
    static const char* t = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    std::string out;
    size_t i = 0;
    for (; i + 2 < in.size(); i += 3) {
        const uint32_t v = uint32_t(uint8_t(in[i])) << 16 | uint32_t(uint8_t(in[i + 1])) << 8 | uint8_t(in[i + 2]);
        for (int s = 18; s >= 0; s -= 6) out += t[(v >> s) & 63];
    }
    if (i < in.size()) {
        uint32_t v = uint32_t(uint8_t(in[i])) << 16;
        if (i + 1 < in.size()) v |= uint32_t(uint8_t(in[i + 1])) << 8;
        out += t[(v >> 18) & 63];
        out += t[(v >> 12) & 63];
        out += i + 1 < in.size() ? t[(v >> 6) & 63] : '=';
        out += '=';
    }
    return out;
}

VideoProcessorConfig test_config() {
    auto c = load_video_processor_config(std::string(QS_SOURCE_DIR) + "/tests/data/video");
    EXPECT_TRUE(c.is_ok()) << c.status().message();
    return c.value();
}

TEST(VideoFileInput, DataUrlAndFileEqualTransformers) {
    ImageInputOptions o;
    if (!video_files_supported()) {
        auto r = load_video("data:video/mp4;base64,AAAA", o, test_config());
        ASSERT_FALSE(r.is_ok());
        EXPECT_NE(r.status().message().find("libavcodec"), std::string::npos) << r.status().message();
        GTEST_SKIP() << "built without libavcodec: only the refusal is checked";
    }
    const auto m = nlohmann::json::parse(qs::test::read_fixture(kDir + "/manifest.json"))["clips"]["h264"];
    auto ref = read_npy_float(kDir + "/h264/pixel_values.npy");
    ASSERT_TRUE(ref.is_ok());
    o.allowed_local_media_path = kDir;
    for (const std::string& url : {"data:video/mp4;base64," + base64(qs::test::read_fixture(kDir + "/h264.mp4")),
                                   kDir + "/h264.mp4"}) {
        auto v = load_video(url, o, test_config());
        ASSERT_TRUE(v.is_ok()) << v.status().message();
        EXPECT_EQ(v->timestamps, m["timestamps"].get<std::vector<double>>());
        EXPECT_EQ(v->patches->grid_t, m["grid_thw"][0].get<int>());
        EXPECT_EQ(v->patches->grid_h, m["grid_thw"][1].get<int>());
        EXPECT_EQ(v->patches->grid_w, m["grid_thw"][2].get<int>());
        EXPECT_EQ(v->patches->values, ref->data);
    }
}

TEST(VideoFileInput, KwargsSampleAndLimitsRefuse) {
    if (!video_files_supported()) GTEST_SKIP() << "built without libavcodec";
    ImageInputOptions o;
    const std::string url = "data:video/mp4;base64," + base64(qs::test::read_fixture(kDir + "/h264.mp4"));
    // 20 frames at 8 fps. num_frames 4: np.linspace(0, 19, 4).round() = 0, 6, 13, 19: two temporal
    // patches at (0 + 6) / 2 / 8 and (13 + 19) / 2 / 8 seconds. fps 1: int(20 / 8) = 2 → min_frames 4.
    MediaKwargs k;
    k.num_frames = 4;
    auto v = load_video(url, o, test_config(), k);
    ASSERT_TRUE(v.is_ok()) << v.status().message();
    EXPECT_EQ(v->patches->grid_t, 2);
    EXPECT_EQ(v->timestamps, (std::vector<double>{0.375, 2.0}));
    MediaKwargs f;
    f.fps = 1;
    auto w = load_video(url, o, test_config(), f);
    ASSERT_TRUE(w.is_ok()) << w.status().message();
    EXPECT_EQ(w->timestamps, v->timestamps);
    EXPECT_EQ(w->patches->values, v->patches->values);
    // Limits: bytes, frames, local files.
    ImageInputOptions small = o;
    small.max_video_bytes = 1000;
    auto big = load_video(url, small, test_config());
    ASSERT_FALSE(big.is_ok());
    EXPECT_NE(big.status().message().find("--max-video-bytes"), std::string::npos) << big.status().message();
    small = o;
    small.max_video_frames = 4;
    auto many = load_video(url, small, test_config());
    ASSERT_FALSE(many.is_ok());
    EXPECT_NE(many.status().message().find("--max-video-frames"), std::string::npos) << many.status().message();
    auto file = load_video(kDir + "/h264.mp4", o, test_config());
    ASSERT_FALSE(file.is_ok());
    EXPECT_NE(file.status().message().find("--allowed-local-media-path"), std::string::npos);
}

}  // namespace
}  // namespace qs

// Video files decoded by image/video_decode (this build's libavformat/libavcodec/libswscale) and
// preprocessed by image/video_processor, against PyAV 18.1 (its own FFmpeg 8) and transformers
// 5.17 (tests/data/video_file, made by tools/make_video_file_fixture.py): the stream metadata
// (frame count, frame rate), the sampled frame indices and video_grid_thw exactly; the RGB
// frames and pixel_values_videos within the decoders' difference (below). Corrupt, truncated and
// non-video bytes and the limits are refused with a message naming the problem. Without
// libavcodec in the build only the refusal is checked.
#include <algorithm>
#include <cmath>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "../common/test_files.h"
#include "image/video_decode.h"
#include "image/video_processor.h"
#include "io/npy.h"

namespace qs {
namespace {

const std::string kDir = std::string(QS_SOURCE_DIR) + "/tests/data/video_file";

nlohmann::json manifest() { return nlohmann::json::parse(qs::test::read_fixture(kDir + "/manifest.json")); }

VideoProcessorConfig test_config() {
    auto c = parse_video_processor_config(qs::test::read_fixture(std::string(QS_SOURCE_DIR) +
                                                    "/tests/data/video/video_preprocessor_config.json"));
    EXPECT_TRUE(c.is_ok()) << c.status().message();
    return c.value();
}

// RGB levels our frames may differ from PyAV's by. Measured: 0 on all three clips (Debian 12's
// FFmpeg 5.1 and PyAV's FFmpeg 8 give identical bytes for these codecs and pixel formats), so the
// frames and pixel_values are checked exactly.
constexpr int kRgbLevels = 0;

PickFrames sampler(const VideoProcessorConfig& cfg) {
    return [cfg](const VideoStreamInfo& info) {
        return sample_frame_indices(info.total_frames, info.fps, std::nullopt, std::nullopt, cfg);
    };
}

TEST(VideoDecode, RefusedWithoutLibavcodecOrForBadBytes) {
    VideoDecodeLimits limits;
    auto r = decode_video("not a video at all, just text", sampler(test_config()), limits);
    ASSERT_FALSE(r.is_ok());
    EXPECT_EQ(r.status().kind(), ErrorKind::kInvalidArgument);
    if (!video_files_supported()) {
        EXPECT_NE(r.status().message().find("libavcodec"), std::string::npos) << r.status().message();
        GTEST_SKIP() << "built without libavcodec: only the refusal is checked";
    }
    EXPECT_NE(r.status().message().find("not a video file"), std::string::npos) << r.status().message();
}

class VideoFile : public ::testing::TestWithParam<std::string> {};

TEST_P(VideoFile, FramesAndPixelValuesEqualPyAVAndTransformers) {
    if (!video_files_supported()) GTEST_SKIP() << "built without libavcodec";
    const auto m = manifest()["clips"][GetParam()];
    const VideoProcessorConfig cfg = test_config();
    VideoDecodeLimits limits;
    auto v = decode_video(qs::test::read_fixture(kDir + "/" + m["file"].get<std::string>()), sampler(cfg), limits);
    ASSERT_TRUE(v.is_ok()) << v.status().message();
    EXPECT_EQ(v->info.total_frames, m["total_frames"].get<int64_t>());
    EXPECT_DOUBLE_EQ(v->info.fps, m["fps"].get<double>());
    // transformers' frames_indices are padded to the temporal patch (the last one repeated).
    std::vector<int64_t> padded = v->indices;
    while (padded.size() % 2) padded.push_back(padded.back());
    EXPECT_EQ(padded, m["indices"].get<std::vector<int64_t>>());
    EXPECT_EQ(frame_timestamps(v->indices, v->info.fps, 2), m["timestamps"].get<std::vector<double>>());

    // RGB frames against PyAV's to_ndarray("rgb24") of the same frames.
    const std::string ref_rgb = qs::test::read_fixture(kDir + "/" + GetParam() + "/frames.rgb");
    std::vector<int64_t> distinct = v->indices;
    distinct.erase(std::unique(distinct.begin(), distinct.end()), distinct.end());
    const size_t frame_bytes = 64 * 64 * 3;
    ASSERT_EQ(ref_rgb.size(), distinct.size() * frame_bytes);
    int max_level = 0;
    int64_t differ = 0;
    for (size_t k = 0, d = 0; k < v->frames.size(); ++k) {
        if (k > 0 && v->indices[k] == v->indices[k - 1]) continue;
        ASSERT_EQ(v->frames[k].rgb.size(), frame_bytes);
        for (size_t i = 0; i < frame_bytes; ++i) {
            const int diff = std::abs(int(uint8_t(ref_rgb[d * frame_bytes + i])) - int(v->frames[k].rgb[i]));
            max_level = std::max(max_level, diff);
            differ += diff != 0;
        }
        ++d;
    }
    // The decoders give the same YUV (H.264, VP9 and FFV1 decoding is bit-exact by specification);
    // the YUV→RGB conversion (libswscale 6.7 here, 9.5 in PyAV) gave identical bytes too.
    EXPECT_LE(max_level, kRgbLevels) << differ << " bytes differ";

    auto p = preprocess_video(v->frames, cfg);
    ASSERT_TRUE(p.is_ok()) << p.status().message();
    EXPECT_EQ(p->grid_t, m["grid_thw"][0].get<int>());
    EXPECT_EQ(p->grid_h, m["grid_thw"][1].get<int>());
    EXPECT_EQ(p->grid_w, m["grid_thw"][2].get<int>());
    auto ref = read_npy_float(kDir + "/" + GetParam() + "/pixel_values.npy");
    ASSERT_TRUE(ref.is_ok()) << ref.status().message();
    ASSERT_EQ(ref->data.size(), p->values.size());
    double max_diff = 0;
    for (size_t i = 0; i < ref->data.size(); ++i)
        max_diff = std::max(max_diff, std::fabs(double(ref->data[i]) - p->values[i]));
    // One RGB level is 2/255 after normalisation with mean = std = 0.5; with kRgbLevels 0 the
    // floats must be equal.
    EXPECT_LE(max_diff, kRgbLevels * 2.0 / 255);
}

INSTANTIATE_TEST_SUITE_P(PyAV, VideoFile, ::testing::Values("h264", "vp9", "ffv1"),
                         [](const ::testing::TestParamInfo<std::string>& i) { return i.param; });

TEST(VideoDecode, CorruptTruncatedAndLimits) {
    if (!video_files_supported()) GTEST_SKIP() << "built without libavcodec";
    const VideoProcessorConfig cfg = test_config();
    const std::string mp4 = qs::test::read_fixture(kDir + "/h264.mp4");
    VideoDecodeLimits limits;
    // Truncated: the header promises frames the file does not hold (or the container is cut).
    auto cut = decode_video(std::string_view(mp4).substr(0, mp4.size() / 2), sampler(cfg), limits);
    ASSERT_FALSE(cut.is_ok());
    EXPECT_EQ(cut.status().kind(), ErrorKind::kInvalidArgument);
    // Too many pixels per frame: checked from the header.
    VideoDecodeLimits small = limits;
    small.max_pixels = 64 * 63;
    auto big = decode_video(mp4, sampler(cfg), small);
    ASSERT_FALSE(big.is_ok());
    EXPECT_NE(big.status().message().find("4096 pixels"), std::string::npos) << big.status().message();
    // Too many frames picked.
    VideoDecodeLimits few = limits;
    few.max_frames = 4;
    auto many = decode_video(mp4, sampler(cfg), few);
    ASSERT_FALSE(many.is_ok());
    EXPECT_NE(many.status().message().find("at most 4"), std::string::npos) << many.status().message();
}

}  // namespace
}  // namespace qs

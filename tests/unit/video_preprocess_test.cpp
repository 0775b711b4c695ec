// The Qwen3-VL video processor against transformers 5.17 (tests/data/video, made by
// tools/make_video_fixture.py): pixel_values_videos and video_grid_thw of frame lists equal
// Qwen3VLVideoProcessor's float for float when the frames are already at their smart_resize size
// (an even and an odd frame count: the last frame repeated), within the torchvision-vs-Pillow
// resize bound when they are not; sample_frames and the video smart_resize equal transformers' on
// a grid of cases; the timestamps are Qwen3VLProcessor's.
#include <cmath>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "../common/test_files.h"
#include "image/image_decode.h"
#include "image/video_processor.h"
#include "io/npy.h"

namespace qs {
namespace {

const std::string kDir = std::string(QS_SOURCE_DIR) + "/tests/data/video";

nlohmann::json manifest() { return nlohmann::json::parse(qs::test::read_fixture(kDir + "/manifest.json")); }

VideoProcessorConfig test_config() {
    auto c = parse_video_processor_config(qs::test::read_fixture(kDir + "/video_preprocessor_config.json"));
    EXPECT_TRUE(c.is_ok()) << c.status().message();
    return c.value();
}

std::vector<RgbImage> clip_frames(const std::string& clip) {
    std::vector<RgbImage> frames;
    const nlohmann::json m = manifest();
    for (const auto& f : m[clip]["frames"]) {
        auto img = decode_image(qs::test::read_fixture(kDir + "/" + clip + "/" + f.get<std::string>()));
        EXPECT_TRUE(img.is_ok()) << img.status().message();
        frames.push_back(std::move(img).value());
    }
    return frames;
}

class VideoClip : public ::testing::TestWithParam<std::string> {};

TEST_P(VideoClip, PixelValuesEqualTransformers) {
    const auto m = manifest()[GetParam()];
    auto p = preprocess_video(clip_frames(GetParam()), test_config());
    ASSERT_TRUE(p.is_ok()) << p.status().message();
    EXPECT_TRUE(p->video);
    EXPECT_EQ(p->grid_t, m["grid_thw"][0].get<int>());
    EXPECT_EQ(p->grid_h, m["grid_thw"][1].get<int>());
    EXPECT_EQ(p->grid_w, m["grid_thw"][2].get<int>());
    auto ref = read_npy_float(kDir + "/" + GetParam() + "/pixel_values.npy");
    ASSERT_TRUE(ref.is_ok()) << ref.status().message();
    ASSERT_EQ(ref->data.size(), p->values.size());
    double max_diff = 0, sum = 0;
    int64_t differ = 0;
    for (size_t i = 0; i < ref->data.size(); ++i) {
        const double d = std::fabs(double(ref->data[i]) - p->values[i]);
        max_diff = std::max(max_diff, d);
        sum += d;
        differ += ref->data[i] != p->values[i];
    }
    if (!m["needs_resize"].get<bool>()) {
        EXPECT_EQ(differ, 0) << "floats differing from transformers (max |diff| " << max_diff << ")";
    } else {
        // Pillow's bicubic (ours) against torchvision's antialiased bicubic (transformers' video
        // path): the image processor's measured bound (docs/VISION.md).
        EXPECT_LE(max_diff, 20.0 * 2 / 255 + 1e-6);
        EXPECT_LE(sum / double(ref->data.size()), 0.01);
        EXPECT_GT(differ, 0) << "a resized clip equal to the float: the bound is not being tested";
    }
}

INSTANTIATE_TEST_SUITE_P(Transformers, VideoClip, ::testing::Values("clip_a", "clip_b", "clip_resize"),
                         [](const ::testing::TestParamInfo<std::string>& i) { return i.param; });

TEST(VideoProcessor, SampleFramesEqualsTransformers) {
    const auto cases = nlohmann::json::parse(qs::test::read_fixture(kDir + "/sample_frames.json"));
    ASSERT_GT(cases.size(), 100u);
    for (const auto& c : cases) {
        VideoProcessorConfig cfg = test_config();
        cfg.min_frames = c["min_frames"].get<int64_t>();
        cfg.max_frames = c["max_frames"].get<int64_t>();
        std::optional<double> fps;
        std::optional<int64_t> num;
        if (!c["fps"].is_null()) fps = c["fps"].get<double>();
        if (!c["num_frames"].is_null()) num = c["num_frames"].get<int64_t>();
        auto idx = sample_frame_indices(c["total"].get<int64_t>(), c["video_fps"].get<double>(), num, fps, cfg);
        ASSERT_TRUE(idx.is_ok()) << idx.status().message();
        EXPECT_EQ(idx.value(), c["indices"].get<std::vector<int64_t>>()) << c.dump();
    }
    EXPECT_FALSE(sample_frame_indices(10, 30.0, 4, 2.0, test_config()).is_ok());
}

TEST(VideoProcessor, SmartResizeEqualsTransformers) {
    const auto cases = nlohmann::json::parse(qs::test::read_fixture(kDir + "/smart_resize.json"));
    int errors = 0;
    for (const auto& c : cases) {
        auto r = smart_resize_video(c["t"].get<int64_t>(), c["h"].get<int>(), c["w"].get<int>(), 2, 32,
                                    c["min_pixels"].get<int64_t>(), c["max_pixels"].get<int64_t>());
        if (c.contains("error")) {
            EXPECT_FALSE(r.is_ok()) << c.dump();
            ++errors;
            continue;
        }
        ASSERT_TRUE(r.is_ok()) << c.dump() << r.status().message();
        EXPECT_EQ(r->height, c["out"][0].get<int>()) << c.dump();
        EXPECT_EQ(r->width, c["out"][1].get<int>()) << c.dump();
    }
    EXPECT_FALSE(smart_resize_video(1, 64, 64, 2, 32, 4096, 65536).is_ok());  // fewer frames than a patch
}

TEST(VideoProcessor, TimestampsAreTheProcessors) {
    // Frame lists: fps 1, indices 0..n-1 (an odd count repeats the last index).
    EXPECT_EQ(frame_timestamps({0, 1, 2, 3}, 1.0, 2), (std::vector<double>{0.5, 2.5}));
    EXPECT_EQ(frame_timestamps({0, 1, 2}, 1.0, 2), (std::vector<double>{0.5, 2.0}));
    EXPECT_EQ(frame_timestamps({0, 15, 30, 45}, 30.0, 2), (std::vector<double>{0.25, 1.25}));
    EXPECT_EQ(timestamp_text(0.5), "<0.5 seconds>");
    EXPECT_EQ(timestamp_text(0.25), "<0.2 seconds>");  // Python rounds the binary value half to even
    EXPECT_EQ(timestamp_text(12.0), "<12.0 seconds>");
}

TEST(VideoProcessor, RefusesMixedFrameSizesAndBadConfig) {
    std::vector<RgbImage> frames = clip_frames("clip_a");
    const std::vector<RgbImage> other = clip_frames("clip_b");
    ASSERT_EQ(frames.size(), 4u);
    ASSERT_FALSE(other.empty());
    frames.push_back(other[0]);
    auto r = preprocess_video(frames, test_config());
    ASSERT_FALSE(r.is_ok());
    EXPECT_NE(r.status().message().find("frame 5"), std::string::npos) << r.status().message();
    EXPECT_FALSE(parse_video_processor_config(R"({"fps": -1})").is_ok());
    EXPECT_FALSE(parse_video_processor_config(R"({"min_frames": 9, "max_frames": 4})").is_ok());
    auto d = parse_video_processor_config("{}");
    ASSERT_TRUE(d.is_ok());
    EXPECT_EQ(d->image.min_pixels, 131072);
    EXPECT_EQ(d->image.max_pixels, 786432);
}

}  // namespace
}  // namespace qs

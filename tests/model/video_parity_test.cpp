// Videos end to end in the model against transformers 5.17 (tests/data/video, made by
// tools/make_video_fixture.py, on the tiny random model of tests/data/vision_parity): a chat with
// one video (4 frames: 2 temporal patches) and one with an image and a video (3 frames: the last
// repeated). The prompts are Qwen3VLProcessor's (timestamps, one <|video_pad|> run per temporal
// patch); the frames are decoded and preprocessed here (image/video_processor), run through the
// tower, placed at the pad rows with get_rope_index's positions; prefill (whole and in chunks of
// 3 tokens) and decode logits must equal transformers' within 1e-3.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "backend/cpu/cpu_ops.h"
#include "image/image_decode.h"
#include "image/image_processor.h"
#include "image/video_processor.h"
#include "io/npy.h"
#include "model/media_runs.h"
#include "model/prompt_images.h"
#include "model/single_sequence.h"
#include "fixture_files.h"
#include "test_util.h"

using namespace qs;

namespace {

constexpr float kTolerance = 1e-3f;
const std::string kModel = test::source_path("tests/data/vision_parity");
const std::string kDir = test::source_path("tests/data/video");
constexpr int64_t kLogitCols = 128;  // the fixture keeps the first 128 vocabulary columns of the prefill

using test::read_bytes;
using test::read_floats;
using test::read_ids;

std::vector<float> columns(const std::vector<float>& a, int64_t width, int64_t keep) {
    std::vector<float> out;
    for (size_t r = 0; r < a.size() / size_t(width); ++r)
        out.insert(out.end(), a.begin() + int64_t(r) * width, a.begin() + int64_t(r) * width + keep);
    return out;
}

ImagePatches load_clip(const std::string& clip) {
    const auto m = nlohmann::json::parse(read_bytes(kDir + "/manifest.json"))[clip];
    std::vector<RgbImage> frames;
    for (const auto& f : m["frames"]) {
        auto img = decode_image(read_bytes(kDir + "/" + clip + "/" + f.get<std::string>()));
        EXPECT_TRUE(img.is_ok()) << img.status().message();
        frames.push_back(std::move(img).value());
    }
    auto cfg = load_video_processor_config(kDir);
    EXPECT_TRUE(cfg.is_ok()) << cfg.status().message();
    auto p = preprocess_video(frames, cfg.value());
    EXPECT_TRUE(p.is_ok()) << p.status().message();
    return std::move(p).value();
}

class VideoParity : public ::testing::TestWithParam<std::string> {
protected:
    static void SetUpTestSuite() {
        auto w = load_model_dir(kModel);
        ASSERT_TRUE(w.is_ok()) << w.status().message();
        weights_ = new ModelWeights(std::move(w).value());
    }
    static void TearDownTestSuite() {
        delete weights_;
        weights_ = nullptr;
    }

    // The case's media in prompt order, and the prompt laid out with transformers' positions.
    PromptImages prepare(const std::string& dir, const std::vector<int32_t>& ids, std::vector<ImagePatches>& media) {
        nlohmann::json c = nlohmann::json::parse(read_bytes(dir + "/case.json"));
        auto improc = load_image_processor_config(kModel);
        EXPECT_TRUE(improc.is_ok());
        for (const auto& part : c.at("parts")) {
            const std::string kind = part[0].get<std::string>(), val = part[1].get<std::string>();
            if (kind == "video") {
                media.push_back(load_clip(val));
            } else if (kind == "image") {
                auto img = decode_image(read_bytes(test::source_path("tests/data/image/" + val)));
                EXPECT_TRUE(img.is_ok());
                auto p = preprocess_image(img.value(), improc.value());
                EXPECT_TRUE(p.is_ok());
                media.push_back(std::move(p).value());
            }
        }
        size_t v = 0;
        for (const auto& m : media) {
            if (!m.video) continue;
            const auto& g = c.at("video_grid_thw")[v++];
            EXPECT_EQ(m.grid_t, g[0].get<int>());
            EXPECT_EQ(m.grid_h, g[1].get<int>());
            EXPECT_EQ(m.grid_w, g[2].get<int>());
        }
        std::vector<const ImagePatches*> ptrs;
        for (const auto& p : media) ptrs.push_back(&p);
        auto pi = prepare_prompt_images(*weights_->visual, ids, weights_->config.image_token_id, ptrs, nullptr,
                                        weights_->config.video_token_id);
        EXPECT_TRUE(pi.is_ok()) << pi.status().message();
        if (pi.is_ok()) test::expect_positions_equal(*pi, dir, ids.size(), c.at("rope_delta").get<int64_t>());
        return std::move(pi).value();
    }

    static ModelWeights* weights_;
};
ModelWeights* VideoParity::weights_ = nullptr;

}  // namespace

TEST_P(VideoParity, PrefillChunkedAndDecode) {
    const std::string dir = kDir + "/" + GetParam();
    const std::vector<int32_t> ids = read_ids(dir + "/ids.npy");
    const std::vector<int32_t> decode_ids = read_ids(dir + "/decode_ids.npy");
    const std::vector<float> ref_prefill = read_floats(dir + "/logits_prefill.npy");
    const std::vector<float> ref_decode = read_floats(dir + "/logits_decode.npy");
    const int64_t T = int64_t(ids.size()), V = weights_->config.vocab_size;
    ASSERT_EQ(weights_->config.video_token_id, 492);
    ASSERT_EQ(int64_t(ref_prefill.size()), T * kLogitCols);
    std::vector<ImagePatches> media;
    const PromptImages images = prepare(dir, ids, media);

    CpuOps ops;
    Qwen36Model model(*weights_, ops);
    {
        SingleSequence seq(model, T + int64_t(decode_ids.size()) + 16);
        seq.set_images(&images);
        const std::vector<float> logits = columns(seq.feed(ids, /*all_rows=*/true), V, kLogitCols);
        const float d = test::max_abs_diff(logits, ref_prefill);
        std::printf("%s: prefill max |diff| %.3g\n", GetParam().c_str(), d);
        EXPECT_LE(d, kTolerance);
        for (size_t i = 0; i < decode_ids.size(); ++i) {
            const std::vector<float> step = seq.feed({decode_ids[i]}, /*all_rows=*/false);
            const std::vector<float> want(ref_decode.begin() + int64_t(i) * V, ref_decode.begin() + int64_t(i + 1) * V);
            EXPECT_LE(test::max_abs_diff(step, want), kTolerance) << "decode step " << i;
        }
    }
    {
        SingleSequence seq(model, T + 16);
        seq.set_images(&images);
        std::vector<float> logits;
        for (int64_t from = 0; from < T; from += 3) {
            const int64_t n = std::min<int64_t>(3, T - from);
            const std::vector<int32_t> part(ids.begin() + from, ids.begin() + from + n);
            const std::vector<float> l = columns(seq.feed(part, /*all_rows=*/true), V, kLogitCols);
            logits.insert(logits.end(), l.begin(), l.end());
        }
        EXPECT_LE(test::max_abs_diff(logits, ref_prefill), kTolerance) << "chunks of 3";
    }
    // Without the video the same tokens give other logits: the test can fail.
    {
        SingleSequence seq(model, T + 16);
        EXPECT_GT(test::max_abs_diff(columns(seq.feed(ids, true), V, kLogitCols), ref_prefill), 10 * kTolerance);
    }
}

INSTANTIATE_TEST_SUITE_P(Cases, VideoParity, ::testing::Values("one_video", "video_and_image"),
                         [](const auto& info) { return info.param; });

TEST(MediaRuns, VideoFramesAndMismatches) {
    ImagePatches video, image;
    video.video = true;
    video.grid_t = 2;
    video.grid_h = 2;
    video.grid_w = 4;  // 2 tokens per temporal patch
    image.grid_t = 1;
    image.grid_h = 2;
    image.grid_w = 2;  // 1 token
    const int32_t I = 7, V = 8, x = 1;
    std::vector<const ImagePatches*> media = {&image, &video};
    auto r = media_runs({x, I, x, V, V, x, V, V, x}, I, V, media, 2);
    ASSERT_TRUE(r.is_ok()) << r.status().message();
    ASSERT_EQ(r->size(), 3u);
    EXPECT_EQ((*r)[2].media, 1u);
    EXPECT_EQ((*r)[2].frame, 1);
    // One frame run missing, a run too short, media in the wrong order, an extra run.
    EXPECT_FALSE(media_runs({x, I, x, V, V, x}, I, V, media, 2).is_ok());
    auto short_run = media_runs({x, I, x, V, x, V, V}, I, V, media, 2);
    ASSERT_FALSE(short_run.is_ok());
    EXPECT_NE(short_run.status().message().find("video 1"), std::string::npos) << short_run.status().message();
    EXPECT_FALSE(media_runs({x, V, V, x, V, V, x, I}, I, V, media, 2).is_ok());
    EXPECT_FALSE(media_runs({x, I, x, V, V, x, V, V, x, V, V}, I, V, media, 2).is_ok());
}

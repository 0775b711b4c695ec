// Images end to end in the model against transformers 5.17 (tests/data/vision_parity, made by
// tools/make_vision_parity_fixture.py): a tiny random Qwen3_5MoeForConditionalGeneration with its
// vision tower, conversations with 1, 2 and 3 images of different grids. The images are decoded
// and preprocessed here (src/image), run through the loaded tower, placed at the pad rows with
// M-RoPE positions; the prefill logits, a chunked prefill whose chunk boundaries fall inside the
// pad runs, and decode steps after the prompt (positions continue with the rope delta) must equal
// transformers' within 1e-3.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "backend/cpu/cpu_ops.h"
#include "image/image_decode.h"
#include "image/image_processor.h"
#include "io/npy.h"
#include "model/prompt_images.h"
#include "model/single_sequence.h"
#include "fixture_files.h"
#include "test_util.h"

using namespace qs;

namespace {

constexpr float kTolerance = 1e-3f;
const std::string kDir = test::source_path("tests/data/vision_parity");

using test::read_bytes;
using test::read_floats;
using test::read_ids;

std::vector<float> rows(const std::vector<float>& a, int64_t from, int64_t n, int64_t width) {
    return std::vector<float>(a.begin() + from * width, a.begin() + (from + n) * width);
}

class VisionParity : public ::testing::TestWithParam<std::string> {
protected:
    static void SetUpTestSuite() {
        auto w = load_model_dir(kDir);
        ASSERT_TRUE(w.is_ok()) << w.status().message();
        weights_ = new ModelWeights(std::move(w).value());
    }
    static void TearDownTestSuite() {
        delete weights_;
        weights_ = nullptr;
    }

    // Decodes and preprocesses the case's images, runs the tower and lays it over the prompt.
    PromptImages prepare(const std::string& dir, const std::vector<int32_t>& ids) {
        nlohmann::json c = nlohmann::json::parse(read_bytes(dir + "/case.json"));
        auto proc = load_image_processor_config(kDir);
        EXPECT_TRUE(proc.is_ok()) << proc.status().message();
        std::vector<ImagePatches> patches;
        for (const auto& name : c.at("images")) {
            auto img = decode_image(read_bytes(test::source_path("tests/data/image/" + name.get<std::string>())));
            EXPECT_TRUE(img.is_ok()) << img.status().message();
            auto p = preprocess_image(img.value(), proc.value());
            EXPECT_TRUE(p.is_ok()) << p.status().message();
            patches.push_back(std::move(p).value());
        }
        // The grids transformers was given.
        auto grid = read_npy_int(dir + "/grid_thw.npy");
        EXPECT_TRUE(grid.is_ok());
        for (size_t i = 0; i < patches.size(); ++i) {
            EXPECT_EQ(patches[i].grid_t, grid->data[i * 3]);
            EXPECT_EQ(patches[i].grid_h, grid->data[i * 3 + 1]);
            EXPECT_EQ(patches[i].grid_w, grid->data[i * 3 + 2]);
        }
        std::vector<const ImagePatches*> ptrs;
        for (const auto& p : patches) ptrs.push_back(&p);
        auto pi = prepare_prompt_images(*weights_->visual, ids, weights_->config.image_token_id, ptrs);
        EXPECT_TRUE(pi.is_ok()) << pi.status().message();
        // transformers' get_rope_index for the same prompt.
        if (pi.is_ok()) test::expect_positions_equal(*pi, dir, ids.size(), c.at("rope_delta").get<int64_t>());
        return std::move(pi).value();
    }

    static ModelWeights* weights_;
};
ModelWeights* VisionParity::weights_ = nullptr;

}  // namespace

TEST(VisionParityFixture, TowerLoadedWithTheModel) {
    auto w = load_model_dir(kDir);
    ASSERT_TRUE(w.is_ok()) << w.status().message();
    ASSERT_TRUE(w->visual != nullptr);
    ASSERT_TRUE(w->config.vision.has_value());
    EXPECT_EQ(w->config.vision->patch_size, 16);
    EXPECT_EQ(w->config.image_token_id, 491);
    EXPECT_EQ(w->config.vision_start_token_id, 488);
    LoadOptions no_vision;
    no_vision.load_vision = false;
    auto text_only = load_model_dir(kDir, no_vision);
    ASSERT_TRUE(text_only.is_ok()) << text_only.status().message();
    EXPECT_TRUE(text_only->visual == nullptr);
    // A text-only checkpoint (flat config, no model.visual.*) has no tower.
    auto text = load_model_dir(test::source_path("tests/data/parity/a_h32_l5_gqa2_v2k_p025__text_sharded"));
    ASSERT_TRUE(text.is_ok()) << text.status().message();
    EXPECT_TRUE(text->visual == nullptr);
    EXPECT_FALSE(text->config.vision.has_value());
}

TEST_P(VisionParity, PrefillChunkedAndDecode) {
    const std::string dir = kDir + "/" + GetParam();
    const std::vector<int32_t> ids = read_ids(dir + "/ids.npy");
    const std::vector<int32_t> decode_ids = read_ids(dir + "/decode_ids.npy");
    const std::vector<float> ref_prefill = read_floats(dir + "/logits_prefill.npy");
    const std::vector<float> ref_decode = read_floats(dir + "/logits_decode.npy");
    const int64_t T = int64_t(ids.size()), V = weights_->config.vocab_size;
    ASSERT_EQ(int64_t(ref_prefill.size()), T * V);
    const PromptImages images = prepare(dir, ids);

    CpuOps ops;
    Qwen36Model model(*weights_, ops);
    {
        SingleSequence seq(model, T + int64_t(decode_ids.size()) + 16);
        seq.set_images(&images);
        const std::vector<float> logits = seq.feed(ids, /*all_rows=*/true);
        const float d = test::max_abs_diff(logits, ref_prefill);
        std::printf("%s: prefill max |diff| %.3g\n", GetParam().c_str(), d);
        EXPECT_LE(d, kTolerance);
        for (size_t i = 0; i < decode_ids.size(); ++i) {
            const std::vector<float> step = seq.feed({decode_ids[i]}, /*all_rows=*/false);
            const float dd = test::max_abs_diff(step, rows(ref_decode, int64_t(i), 1, V));
            EXPECT_LE(dd, kTolerance) << "decode step " << i;
        }
    }
    // Chunks of 5 tokens: boundaries fall inside every image's pad run.
    for (int64_t chunk : {5, 3}) {
        SingleSequence seq(model, T + 16);
        seq.set_images(&images);
        std::vector<float> logits;
        for (int64_t from = 0; from < T; from += chunk) {
            const int64_t n = std::min(chunk, T - from);
            const std::vector<int32_t> part(ids.begin() + from, ids.begin() + from + n);
            const std::vector<float> l = seq.feed(part, /*all_rows=*/true);
            logits.insert(logits.end(), l.begin(), l.end());
        }
        EXPECT_LE(test::max_abs_diff(logits, ref_prefill), kTolerance) << "chunk " << chunk;
    }
    // Without the images the same tokens give other logits: the test can fail.
    {
        SingleSequence seq(model, T + 16);
        EXPECT_GT(test::max_abs_diff(seq.feed(ids, true), ref_prefill), 10 * kTolerance);
    }
}

INSTANTIATE_TEST_SUITE_P(Cases, VisionParity, ::testing::Values("one_image", "two_images", "three_images"),
                         [](const auto& info) { return info.param; });

TEST(PromptImages, MismatchedImageCountIsAnError) {
    auto w = load_model_dir(kDir);
    ASSERT_TRUE(w.is_ok()) << w.status().message();
    const std::vector<int32_t> ids = read_ids(kDir + "/one_image/ids.npy");
    // One pad run, no image.
    auto r = prepare_prompt_images(*w->visual, ids, w->config.image_token_id, {});
    ASSERT_FALSE(r.is_ok());
    EXPECT_EQ(r.status().kind(), ErrorKind::kInvalidArgument) << r.status().message();
}

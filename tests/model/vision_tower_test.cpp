// The reference vision tower against transformers 5.17's Qwen3_5MoeVisionModel on a tiny random
// tower (tests/data/vision, made by tools/make_vision_tower_fixture.py): two images of different
// grids in one call, so attention must stay within each image.
#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "../common/test_files.h"
#include "config/vision_config.h"
#include "io/checkpoint.h"
#include "io/npy.h"
#include "model/mrope_positions.h"
#include "model/vision_tower.h"

namespace qs {
namespace {

const std::string kDir = std::string(QS_SOURCE_DIR) + "/tests/data/vision";

double max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
    double m = 0;
    for (size_t i = 0; i < a.size(); ++i) m = std::max(m, std::fabs(double(a[i]) - b[i]));
    return m;
}

TEST(VisionTower, EqualsTransformersOnTwoImages) {
    auto cfg = parse_vision_config(nlohmann::json::parse(qs::test::read_fixture(kDir + "/config.json"))["vision_config"]);
    ASSERT_TRUE(cfg.is_ok()) << cfg.status().message();
    auto ckpt = Checkpoint::open(kDir);
    ASSERT_TRUE(ckpt.is_ok()) << ckpt.status().message();
    auto tower = VisionTower::load(*ckpt.value(), cfg.value());
    ASSERT_TRUE(tower.is_ok()) << tower.status().message();

    auto pv = read_npy_float(kDir + "/pixel_values.npy");
    auto grid = read_npy_int(kDir + "/grid_thw.npy");
    ASSERT_TRUE(pv.is_ok() && grid.is_ok());
    std::vector<ImagePatches> imgs(size_t(grid->shape[0]));
    int64_t row = 0;
    for (size_t i = 0; i < imgs.size(); ++i) {
        ImagePatches& p = imgs[i];
        p.grid_t = int(grid->data[i * 3]);
        p.grid_h = int(grid->data[i * 3 + 1]);
        p.grid_w = int(grid->data[i * 3 + 2]);
        p.patch_dim = pv->shape[1];
        p.values.assign(pv->data.begin() + row * p.patch_dim, pv->data.begin() + (row + p.rows()) * p.patch_dim);
        row += p.rows();
    }
    ASSERT_EQ(row, pv->shape[0]);
    std::vector<const ImagePatches*> ptrs;
    for (const auto& p : imgs) ptrs.push_back(&p);
    std::vector<float> blocks;
    auto out = tower->forward(ptrs, nullptr, &blocks);
    ASSERT_TRUE(out.is_ok()) << out.status().message();

    auto ref_blocks = read_npy_float(kDir + "/ref_blocks.npy");
    auto ref = read_npy_float(kDir + "/ref_merged.npy");
    ASSERT_TRUE(ref.is_ok() && ref_blocks.is_ok());
    ASSERT_EQ(blocks.size(), ref_blocks->data.size());
    ASSERT_EQ(out->size(), ref->data.size());
    const double d_blocks = max_abs_diff(blocks, ref_blocks->data), d_out = max_abs_diff(out.value(), ref->data);
    std::printf("max |diff|: last block %.3g, merged embeddings %.3g\n", d_blocks, d_out);
    EXPECT_LE(d_blocks, 1e-4);
    EXPECT_LE(d_out, 1e-4);
}

TEST(VisionTower, MissingTensorIsNamed) {
    auto ckpt = Checkpoint::open(kDir);
    ASSERT_TRUE(ckpt.is_ok());
    VisionConfig cfg;  // the release shapes: nothing in the tiny checkpoint fits
    auto tower = VisionTower::load(*ckpt.value(), cfg);
    ASSERT_FALSE(tower.is_ok());
    EXPECT_NE(tower.status().message().find("model.visual.patch_embed.proj.weight"), std::string::npos)
        << tower.status().message();
}

TEST(VisionConfig, BadFieldsAreNamed) {
    auto bad = parse_vision_config(nlohmann::json::parse(R"({"num_heads": 0})"));
    ASSERT_FALSE(bad.is_ok());
    EXPECT_NE(bad.status().message().find("vision_config.num_heads"), std::string::npos);
    auto act = parse_vision_config(nlohmann::json::parse(R"({"hidden_act": "relu"})"));
    ASSERT_FALSE(act.is_ok());
    EXPECT_NE(act.status().message().find("hidden_act"), std::string::npos);
    auto grid = parse_vision_config(nlohmann::json::parse(R"({"num_position_embeddings": 10})"));
    ASSERT_FALSE(grid.is_ok());
}

TEST(MropePositions, EqualTransformersGetRopeIndex) {
    const auto cases = nlohmann::json::parse(qs::test::read_fixture(kDir + "/mrope_cases.json"));
    ASSERT_GE(cases.size(), 5u);
    for (const auto& c : cases) {
        std::vector<bool> is_image;
        for (int t : c["token_types"]) is_image.push_back(t == 1);
        std::vector<ImageGrid> grids;
        for (const auto& g : c["grids"]) grids.push_back({g[0].get<int>(), g[1].get<int>(), g[2].get<int>()});
        auto r = mrope_positions(is_image, grids, 2);
        ASSERT_TRUE(r.is_ok()) << r.status().message();
        for (int s = 0; s < 3; ++s) {
            EXPECT_EQ(r->pos[size_t(s)], c["positions"][size_t(s)].get<std::vector<int32_t>>()) << c["grids"].dump();
        }
        EXPECT_EQ(r->delta, c["delta"].get<int64_t>()) << c["grids"].dump();
    }
}

TEST(MropePositions, PlaceholderCountMustMatchTheGrid) {
    std::vector<bool> is_image = {false, true, true, true, false};
    auto r = mrope_positions(is_image, {{1, 4, 4}}, 2);
    ASSERT_FALSE(r.is_ok());
    EXPECT_NE(r.status().message().find("3 placeholder tokens, its grid needs 4"), std::string::npos)
        << r.status().message();
    EXPECT_FALSE(mrope_positions(is_image, {}, 2).is_ok());
}

}  // namespace
}  // namespace qs

// Dummy vision towers (`--dummy-vision`): the shapes of a tower transformers made (the committed
// tests/data/vision checkpoint, loaded through the same VisionTower::build), deterministic by seed,
// scaled so an image's embeddings stay finite and O(1).
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "../common/test_files.h"
#include "io/checkpoint.h"
#include "model/dummy_vision_tower.h"

using namespace qs;

namespace {

const std::string kDir = std::string(QS_SOURCE_DIR) + "/tests/data/vision";

VisionConfig fixture_config() {
    auto cfg = parse_vision_config(nlohmann::json::parse(qs::test::read_fixture(kDir + "/config.json"))["vision_config"]);
    EXPECT_TRUE(cfg.is_ok()) << cfg.status().message();
    return cfg.value();
}

void expect_same_shape(const VisionLinear& a, const VisionLinear& b, const std::string& what) {
    EXPECT_EQ(a.in, b.in) << what;
    EXPECT_EQ(a.out, b.out) << what;
    EXPECT_EQ(a.w.size(), b.w.size()) << what;
    EXPECT_EQ(a.b.size(), b.b.size()) << what;
}

double rms(const std::vector<float>& v) {
    double s = 0;
    for (float x : v) s += double(x) * x;
    return std::sqrt(s / double(v.size()));
}

}  // namespace

TEST(DummyVisionTower, HasTheShapesOfACheckpointTransformersMade) {
    const VisionConfig cfg = fixture_config();
    auto ckpt = Checkpoint::open(kDir);
    ASSERT_TRUE(ckpt.is_ok()) << ckpt.status().message();
    auto real = VisionTower::load(*ckpt.value(), cfg);
    ASSERT_TRUE(real.is_ok()) << real.status().message();
    const VisionWeights& r = real->weights();
    const VisionTower dummy = make_dummy_vision_tower(cfg, 3);
    const VisionWeights& d = dummy.weights();
    EXPECT_EQ(d.dims.hidden, r.dims.hidden);
    EXPECT_EQ(d.dims.heads, r.dims.heads);
    EXPECT_EQ(d.dims.intermediate, r.dims.intermediate);
    EXPECT_EQ(d.dims.patch_dim, r.dims.patch_dim);
    EXPECT_EQ(d.dims.pos_side, r.dims.pos_side);
    EXPECT_EQ(d.dims.out_hidden, r.dims.out_hidden);
    expect_same_shape(d.patch_embed, r.patch_embed, "patch_embed");
    EXPECT_EQ(d.pos_embed.size(), r.pos_embed.size());
    ASSERT_EQ(d.blocks.size(), r.blocks.size());
    for (size_t i = 0; i < d.blocks.size(); ++i) {
        expect_same_shape(d.blocks[i].qkv, r.blocks[i].qkv, "qkv");
        expect_same_shape(d.blocks[i].proj, r.blocks[i].proj, "proj");
        expect_same_shape(d.blocks[i].fc1, r.blocks[i].fc1, "fc1");
        expect_same_shape(d.blocks[i].fc2, r.blocks[i].fc2, "fc2");
        EXPECT_EQ(d.blocks[i].norm1.w.size(), r.blocks[i].norm1.w.size());
    }
    expect_same_shape(d.merger_fc1, r.merger_fc1, "merger_fc1");
    expect_same_shape(d.merger_fc2, r.merger_fc2, "merger_fc2");
}

TEST(DummyVisionTower, DeterministicBySeedAndScaled) {
    const VisionConfig cfg = fixture_config();
    const VisionTower a = make_dummy_vision_tower(cfg, 5), b = make_dummy_vision_tower(cfg, 5),
                      c = make_dummy_vision_tower(cfg, 6);
    EXPECT_EQ(a.weights().blocks[0].fc1.w, b.weights().blocks[0].fc1.w);
    EXPECT_NE(a.weights().blocks[0].fc1.w, c.weights().blocks[0].fc1.w);
    // Distinct tensors get distinct values (keyed by name), not one stream reused.
    EXPECT_NE(a.weights().blocks[0].qkv.b, a.weights().blocks[0].proj.b);
    // Linears: uniform with std 1/sqrt(fan-in); LayerNorm weights in [0.9, 1.1).
    const VisionLinear& fc2 = a.weights().blocks[0].fc2;
    EXPECT_NEAR(rms(fc2.w) * std::sqrt(double(fc2.in)), 1.0, 0.1);
    for (float x : a.weights().blocks[0].norm1.w) {
        EXPECT_GE(x, 0.9f);
        EXPECT_LT(x, 1.1f);
    }
}

TEST(DummyVisionTower, ImageEmbeddingsStayFiniteAndOrderOne) {
    const VisionConfig cfg = fixture_config();
    const VisionTower t = make_dummy_vision_tower(cfg, 1);
    ImagePatches img;
    img.grid_t = 1;
    img.grid_h = 4;
    img.grid_w = 6;
    img.patch_dim = cfg.patch_dim();
    img.values.resize(size_t(img.rows() * img.patch_dim));
    for (size_t i = 0; i < img.values.size(); ++i) img.values[i] = float(std::sin(double(i) * 0.37));  // normalised pixels
    auto out = t.forward({&img});
    ASSERT_TRUE(out.is_ok()) << out.status().message();
    ASSERT_EQ(out->size(), size_t(img.merged_tokens(cfg.spatial_merge_size) * cfg.out_hidden_size));
    for (float x : *out) ASSERT_TRUE(std::isfinite(x));
    const double r = rms(*out);
    EXPECT_GT(r, 0.05);
    EXPECT_LT(r, 20.0);
}

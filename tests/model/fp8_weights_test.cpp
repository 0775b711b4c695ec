// FP8 block weights through the model: dummy FP8 weights are the quantised BF16 dummy weights,
// the writer and the loader round-trip FP8 checkpoints (per-expert and fused, F32 and BF16 scales,
// both prefixes) bit for bit, and the loader names every bad scale or misplaced FP8 tensor.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>

#include "backend/cpu/cpu_ops.h"
#include "io/safetensors.h"
#include "model/fp8_block.h"
#include "model/single_sequence.h"
#include "model/weights_writer.h"
#include "linear_walk.h"
#include "test_util.h"

using namespace qs;
using qs::test::for_each_linear;
namespace fs = std::filesystem;

namespace {

std::string temp_dir(const std::string& name) {
    fs::path p = fs::temp_directory_path() / ("qs_fp8_test_" + name + "_" + std::to_string(::getpid()));
    fs::remove_all(p);
    return p.string();
}

std::vector<float> logits_of(const ModelWeights& w, const std::vector<int32_t>& ids) {
    CpuOps ops;
    Qwen36Model model(w, ops);
    SingleSequence seq(model, int64_t(ids.size()));
    return seq.feed(ids, true);
}

// Same format, same dequantised rows, and for FP8 the same scale values.
void expect_same_linears(const ModelWeights& a, const ModelWeights& b) {
    std::vector<std::pair<std::string, const LinearWeight*>> la, lb;
    for_each_linear(a, [&](const std::string& n, const LinearWeight& w) { la.emplace_back(n, &w); });
    for_each_linear(b, [&](const std::string& n, const LinearWeight& w) { lb.emplace_back(n, &w); });
    ASSERT_EQ(la.size(), lb.size());
    for (size_t i = 0; i < la.size(); ++i) {
        const LinearWeight &x = *la[i].second, &y = *lb[i].second;
        ASSERT_EQ(x.format, y.format) << la[i].first;
        ASSERT_EQ(x.out_features, y.out_features) << la[i].first;
        std::vector<float> rx(size_t(x.in_features)), ry(size_t(y.in_features));
        for (int64_t r = 0; r < x.out_features; ++r) {
            x.row_to_f32(r, rx.data());
            y.row_to_f32(r, ry.data());
            ASSERT_EQ(rx, ry) << la[i].first << " row " << r;
        }
        if (x.format == WeightFormat::kFP8Block) {
            EXPECT_EQ(x.scale_inv_f32(), y.scale_inv_f32()) << la[i].first;
        }
    }
}

// Rewrites DIR/model.safetensors through `edit`, which may drop, add or change tensors.
void rewrite(const std::string& dir, const std::function<void(std::vector<TensorToWrite>&)>& edit) {
    auto file = SafetensorsFile::open(dir + "/model.safetensors");
    ASSERT_TRUE(file.is_ok()) << file.status().message();
    std::vector<TensorToWrite> ts;
    for (const auto& [name, t] : (*file)->tensors()) ts.push_back({name, t.dtype, t.shape, t.data});
    edit(ts);
    ASSERT_TRUE(write_safetensors(dir + "/model.new", ts).is_ok());
    file->reset();
    fs::rename(dir + "/model.new", dir + "/model.safetensors");
}

void edit_config(const std::string& dir, const std::function<void(nlohmann::json&)>& edit) {
    std::ifstream in(dir + "/config.json");
    nlohmann::json j = nlohmann::json::parse(in);
    edit(j);
    std::ofstream(dir + "/config.json") << j.dump(2);
}

TensorToWrite* find(std::vector<TensorToWrite>& ts, const std::string& name) {
    for (auto& t : ts)
        if (t.name == name) return &t;
    return nullptr;
}

const std::vector<int32_t> kIds = {1, 2, 3, 500, 7, 9, 44};

}  // namespace

TEST(Fp8Weights, DummyFp8IsTheQuantisedBf16Dummy) {
    const ModelConfig c = tiny_model_config();  // hidden 64: every matrix has edge blocks
    ModelWeights fp8 = make_dummy_weights(c, 5, true, WeightFormat::kFP8Block);
    ModelWeights bf16 = make_dummy_weights(c, 5, true, WeightFormat::kDense);
    EXPECT_EQ(fp8.layers[0].gdn.in_proj_qkv.format, WeightFormat::kFP8Block);
    EXPECT_EQ(fp8.layers[0].moe.experts[3].down_proj.format, WeightFormat::kFP8Block);
    EXPECT_EQ(fp8.layers[0].gdn.in_proj_a.format, WeightFormat::kDense);
    EXPECT_EQ(fp8.layers[3].moe.router.format, WeightFormat::kDense);
    EXPECT_EQ(fp8.mtp.fc.format, WeightFormat::kDense);
    EXPECT_EQ(fp8.mtp.layer.attn.q_proj.format, WeightFormat::kFP8Block);
    EXPECT_TRUE(fp8.config.quantization.quantized());
    EXPECT_FALSE(bf16.config.quantization.quantized());
    EXPECT_LT(fp8.storage_bytes(), bf16.storage_bytes());

    // The writer quantises the BF16 dummy the same way the dummy maker did.
    const std::string dir = temp_dir("dummy");
    SaveOptions o;
    o.format = WeightFormat::kFP8Block;
    o.fused_experts = false;
    ASSERT_TRUE(save_model_dir(bf16, dir, o).is_ok());
    auto loaded = load_model_dir(dir);
    ASSERT_TRUE(loaded.is_ok()) << loaded.status().message();
    expect_same_linears(fp8, *loaded);
    EXPECT_EQ(loaded->config.quantization, fp8.config.quantization);
    EXPECT_EQ(logits_of(fp8, kIds), logits_of(*loaded, kIds));
    fs::remove_all(dir);
}

TEST(Fp8Weights, WriterAndLoaderRoundTripBitForBit) {
    const ModelConfig c = tiny_model_config();
    ModelWeights fp8 = make_dummy_weights(c, 6, true, WeightFormat::kFP8Block);
    const std::vector<float> ref = logits_of(fp8, kIds);
    struct Case {
        std::string name, prefix;
        DType scale_dtype;
    };
    for (const Case& cs : {Case{"lang_f32", "model.language_model.", DType::kF32}, Case{"text_bf16", "model.", DType::kBF16}}) {
        const std::string dir = temp_dir(cs.name);
        SaveOptions o;
        o.prefix = cs.prefix;
        o.fused_experts = false;
        o.format = WeightFormat::kFP8Block;
        o.scale_dtype = cs.scale_dtype;  // only for newly quantised linears: these are copied
        ASSERT_TRUE(save_model_dir(fp8, dir, o).is_ok());
        auto loaded = load_model_dir(dir);
        ASSERT_TRUE(loaded.is_ok()) << cs.name << ": " << loaded.status().message();
        expect_same_linears(fp8, *loaded);
        EXPECT_EQ(logits_of(*loaded, kIds), ref) << cs.name;
        fs::remove_all(dir);
    }

    // BF16 scales from a dense model: the loader reads them as stored.
    ModelWeights dense = make_dummy_weights(c, 6);
    const std::string dir = temp_dir("bf16_scales");
    SaveOptions o;
    o.fused_experts = false;
    o.format = WeightFormat::kFP8Block;
    o.scale_dtype = DType::kBF16;
    ASSERT_TRUE(save_model_dir(dense, dir, o).is_ok());
    auto loaded = load_model_dir(dir);
    ASSERT_TRUE(loaded.is_ok()) << loaded.status().message();
    EXPECT_EQ(loaded->layers[0].gdn.out_proj.scale_inv.dtype, DType::kBF16);
    // A different rounding of the scales (so some codes differ too), of the same quality: as far
    // from the dense model as the F32-scale quantisation is.
    const std::vector<float> dense_logits = logits_of(dense, kIds), bf16_logits = logits_of(*loaded, kIds);
    const float d_f32 = test::max_abs_diff(ref, dense_logits), d_bf16 = test::max_abs_diff(bf16_logits, dense_logits);
    std::printf("dummy tiny: |fp8(f32 scales) - bf16| %.3f, |fp8(bf16 scales) - bf16| %.3f, between %.3f\n", d_f32,
                d_bf16, test::max_abs_diff(bf16_logits, ref));
    EXPECT_GT(test::max_abs_diff(bf16_logits, ref), 0.0f);
    EXPECT_LT(d_bf16, 1.5f * d_f32);
    // Fused FP8 experts need block-aligned gate/up halves: tiny's moe_intermediate_size is 32.
    o.fused_experts = true;
    Status s = save_model_dir(dense, dir + "_fused", o);
    ASSERT_FALSE(s.is_ok());
    EXPECT_NE(s.message().find("not a multiple of 128"), std::string::npos) << s.message();
    fs::remove_all(dir);
    fs::remove_all(dir + "_fused");
}

TEST(Fp8Weights, FusedFp8ExpertsLoad) {
    ModelConfig c = tiny_model_config();
    c.moe_intermediate_size = 128;  // gate and up each a whole number of 128-row blocks
    ModelWeights fp8 = make_dummy_weights(c, 7, true, WeightFormat::kFP8Block);
    const std::string dir = temp_dir("fused");
    SaveOptions o;
    o.format = WeightFormat::kFP8Block;
    o.fused_experts = true;
    ASSERT_TRUE(save_model_dir(fp8, dir, o).is_ok());
    auto file = SafetensorsFile::open(dir + "/model.safetensors");
    ASSERT_TRUE(file.is_ok());
    const TensorInfo* s = (*file)->find("model.language_model.layers.0.mlp.experts.gate_up_proj_scale_inv");
    ASSERT_NE(s, nullptr);
    EXPECT_EQ(s->shape, (std::vector<int64_t>{8, 2, 1}));
    auto loaded = load_model_dir(dir);
    ASSERT_TRUE(loaded.is_ok()) << loaded.status().message();
    expect_same_linears(fp8, *loaded);
    EXPECT_EQ(logits_of(*loaded, kIds), logits_of(fp8, kIds));
    fs::remove_all(dir);
}

TEST(Fp8Weights, LoaderNamesBadScalesAndMisplacedFp8) {
    const ModelConfig c = tiny_model_config();
    ModelWeights fp8 = make_dummy_weights(c, 8, true, WeightFormat::kFP8Block);
    const std::string dir = temp_dir("bad");
    SaveOptions o;
    o.format = WeightFormat::kFP8Block;
    o.fused_experts = false;
    const std::string q = "model.language_model.layers.3.self_attn.q_proj.weight";
    const std::string router = "model.language_model.layers.1.mlp.gate.weight";
    auto expect_error = [&](const std::string& what, const std::function<void(std::vector<TensorToWrite>&)>& edit,
                            const std::function<void(nlohmann::json&)>& config_edit = nullptr) {
        ASSERT_TRUE(save_model_dir(fp8, dir, o).is_ok());
        if (edit) rewrite(dir, edit);
        if (config_edit) edit_config(dir, config_edit);
        auto r = load_model_dir(dir);
        ASSERT_FALSE(r.is_ok()) << what;
        EXPECT_NE(r.status().message().find(what), std::string::npos) << r.status().message();
    };
    expect_error("tensor " + q + " is F8_E4M3 but its scale tensor " + q + "_scale_inv is missing",
                 [&](auto& ts) { std::erase_if(ts, [&](const TensorToWrite& t) { return t.name == q + "_scale_inv"; }); });
    expect_error("tensor " + q + "_scale_inv has shape [2, 2] but the FP8 weight " + q +
                     " needs [2, 1] (one scale per 128x128 block)",
                 [&](auto& ts) {
                     static const float four[4] = {1, 1, 1, 1};
                     *find(ts, q + "_scale_inv") = {q + "_scale_inv", DType::kF32, {2, 2}, four};
                 });
    expect_error("tensor " + q + "_scale_inv has dtype F16; expected F32 or BF16",
                 [&](auto& ts) { find(ts, q + "_scale_inv")->dtype = DType::kF16; });
    static const float inf_scale[2] = {1.0f, INFINITY};
    expect_error("tensor " + q + "_scale_inv has a non-finite scale (inf) at flat index 1",
                 [&](auto& ts) { find(ts, q + "_scale_inv")->data = inf_scale; });
    expect_error("tensor " + router + " is F8_E4M3 but model.language_model.layers.1.mlp.gate stays unquantised",
                 [&](auto& ts) { find(ts, router)->dtype = DType::kF8E4M3; });
    static const float one[1] = {1.0f};
    expect_error("tensor " + router + "_scale_inv exists but " + router + " is not F8_E4M3",
                 [&](auto& ts) { ts.push_back({router + "_scale_inv", DType::kF32, {1, 1}, one}); });
    expect_error("is F8_E4M3 but config.json has no quantization_config", nullptr,
                 [](nlohmann::json& j) { j.erase("quantization_config"); });
    expect_error("tensor " + q + " is F8_E4M3 but quantization_config.modules_to_not_convert lists " +
                     q.substr(0, q.size() - 7),
                 nullptr, [](nlohmann::json& j) { j["quantization_config"]["modules_to_not_convert"].push_back("layers.3.self_attn"); });
    expect_error("weight_block_size must be [128, 128], got [64, 64]", nullptr,
                 [](nlohmann::json& j) { j["quantization_config"]["weight_block_size"] = {64, 64}; });
    fs::remove_all(dir);
}

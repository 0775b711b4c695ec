// Checkpoint → weights: both prefixes, both expert layouts and any float dtype load to the same
// model; missing, unexpected and mis-shaped tensors are errors naming the tensor.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "backend/cpu/cpu_ops.h"
#include "io/checkpoint.h"
#include "io/safetensors.h"
#include "model/single_sequence.h"
#include "model/weights_writer.h"
#include "test_util.h"

using namespace qs;
namespace fs = std::filesystem;

namespace {

std::string temp_dir(const std::string& name) {
    fs::path p = fs::temp_directory_path() / ("qs_weights_test_" + name + "_" + std::to_string(::getpid()));
    fs::remove_all(p);
    return p.string();
}

std::vector<float> logits_of(const ModelWeights& w, const std::vector<int32_t>& ids) {
    CpuOps ops;
    Qwen36Model model(w, ops);
    SingleSequence seq(model, int64_t(ids.size()));
    return seq.feed(ids, true);
}

// Rewrites DIR/model.safetensors through `edit`, which may drop, add or change tensors.
void rewrite(const std::string& dir, const std::function<void(std::vector<TensorToWrite>&)>& edit) {
    auto file = SafetensorsFile::open(dir + "/model.safetensors");
    ASSERT_TRUE(file.is_ok()) << file.status().message();
    std::vector<TensorToWrite> ts;
    for (const auto& [name, t] : (*file)->tensors()) ts.push_back({name, t.dtype, t.shape, t.data});
    edit(ts);
    const std::string tmp = dir + "/model.new";
    ASSERT_TRUE(write_safetensors(tmp, ts).is_ok());
    file->reset();
    fs::rename(tmp, dir + "/model.safetensors");
}

}  // namespace

TEST(WeightsLoader, LayoutsPrefixesAndDtypesLoadTheSameModel) {
    const ModelConfig c = tiny_model_config();
    ModelWeights dummy = make_dummy_weights(c, 21);
    const std::vector<int32_t> ids = {1, 2, 3, 500, 7, 9};
    const std::vector<float> ref = logits_of(dummy, ids);

    struct Case {
        std::string name;
        SaveOptions opt;
    };
    std::vector<Case> cases = {
        {"fused_bf16", {"model.language_model.", true, DType::kBF16}},
        {"per_expert_bf16", {"model.language_model.", false, DType::kBF16}},
        {"text_prefix_f32", {"model.", true, DType::kF32}},
        {"per_expert_f32", {"model.", false, DType::kF32}},
    };
    for (const auto& cs : cases) {
        const std::string dir = temp_dir(cs.name);
        ASSERT_TRUE(save_model_dir(dummy, dir, cs.opt).is_ok());
        auto loaded = load_model_dir(dir);
        ASSERT_TRUE(loaded.is_ok()) << cs.name << ": " << loaded.status().message();
        EXPECT_TRUE(loaded->mtp.present);
        // The dummy weights are bf16 values: every storage dtype here represents them exactly.
        EXPECT_EQ(test::max_abs_diff(ref, logits_of(*loaded, ids)), 0.0f) << cs.name;
        fs::remove_all(dir);
    }
}

TEST(WeightsLoader, F16CheckpointIsCloseToBf16) {
    const ModelConfig c = tiny_model_config();
    ModelWeights dummy = make_dummy_weights(c, 22);
    const std::string dir = temp_dir("f16");
    ASSERT_TRUE(save_model_dir(dummy, dir, {"model.", true, DType::kF16}).is_ok());
    auto loaded = load_model_dir(dir);
    ASSERT_TRUE(loaded.is_ok()) << loaded.status().message();
    EXPECT_LT(test::max_abs_diff(logits_of(dummy, {4, 5, 6}), logits_of(*loaded, {4, 5, 6})), 1e-2f);
    fs::remove_all(dir);
}

TEST(WeightsLoader, MissingUnexpectedAndMisshapedTensorsAreNamed) {
    const ModelConfig c = tiny_model_config();
    ModelWeights dummy = make_dummy_weights(c, 23);
    const std::string dir = temp_dir("bad");

    ASSERT_TRUE(save_model_dir(dummy, dir).is_ok());
    rewrite(dir, [](auto& ts) {
        std::erase_if(ts, [](const TensorToWrite& t) { return t.name == "model.language_model.layers.1.linear_attn.A_log"; });
    });
    auto r = load_model_dir(dir);
    ASSERT_FALSE(r.is_ok());
    EXPECT_NE(r.status().message().find("missing tensors: model.language_model.layers.1.linear_attn.A_log"),
              std::string::npos) << r.status().message();

    ASSERT_TRUE(save_model_dir(dummy, dir).is_ok());
    static const float extra[2] = {1, 2};
    rewrite(dir, [](auto& ts) { ts.push_back({"model.language_model.layers.0.bogus.weight", DType::kF32, {2}, extra}); });
    r = load_model_dir(dir);
    ASSERT_FALSE(r.is_ok());
    EXPECT_NE(r.status().message().find("unexpected tensors: model.language_model.layers.0.bogus.weight"),
              std::string::npos) << r.status().message();

    ASSERT_TRUE(save_model_dir(dummy, dir).is_ok());
    rewrite(dir, [](auto& ts) {
        for (auto& t : ts)
            if (t.name == "model.language_model.layers.3.self_attn.k_norm.weight") t.shape = {16, 2};
    });
    r = load_model_dir(dir);
    ASSERT_FALSE(r.is_ok());
    EXPECT_NE(r.status().message().find("tensor model.language_model.layers.3.self_attn.k_norm.weight has shape [16, 2] "
                                        "but the config implies [32]"),
              std::string::npos) << r.status().message();

    // Visual tensors are skipped, not unexpected.
    ASSERT_TRUE(save_model_dir(dummy, dir).is_ok());
    rewrite(dir, [](auto& ts) { ts.push_back({"model.visual.blocks.0.attn.qkv.weight", DType::kF32, {2}, extra}); });
    r = load_model_dir(dir);
    EXPECT_TRUE(r.is_ok()) << r.status().message();
    fs::remove_all(dir);
}

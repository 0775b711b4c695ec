// quantization_config: the official FP8 layout parses, everything qwenserve cannot run is refused
// with a message naming the field, modules_to_not_convert matching, and the round trip through
// model_config_to_json.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "config/model_config.h"

using namespace qs;
using json = nlohmann::json;

namespace {

// Qwen's FP8 release (spec §4.2).
json official() {
    return json{{"quant_method", "fp8"},
                {"fmt", "e4m3"},
                {"activation_scheme", "dynamic"},
                {"weight_block_size", {128, 128}},
                {"modules_to_not_convert", {"lm_head", "model.language_model.layers.0.mlp.gate", "model.visual"}}};
}

std::string error_of(const json& q) {
    auto r = parse_quantization_config(q, "config.json: quantization_config");
    return r.is_ok() ? "" : r.status().message();
}

}  // namespace

TEST(QuantizationConfig, OfficialFp8Parses) {
    auto q = parse_quantization_config(official(), "q");
    ASSERT_TRUE(q.is_ok()) << q.status().message();
    EXPECT_EQ(q->method, QuantMethod::kFP8Block);
    EXPECT_EQ(q->modules_to_not_convert.size(), 3u);
    // fmt and activation_scheme may be absent; vLLM's ignored_layers is read too.
    json minimal = {{"quant_method", "fp8"}, {"weight_block_size", {128, 128}}, {"ignored_layers", {"lm_head"}}};
    q = parse_quantization_config(minimal, "q");
    ASSERT_TRUE(q.is_ok()) << q.status().message();
    EXPECT_EQ(q->modules_to_not_convert, std::vector<std::string>{"lm_head"});
}

TEST(QuantizationConfig, UnsupportedSettingsAreNamed) {
    auto with = [](const char* key, json v) {
        json q = official();
        if (v.is_null()) q.erase(key);
        else q[key] = v;
        return q;
    };
    EXPECT_EQ(error_of(with("quant_method", "awq")),
              "config.json: quantization_config.quant_method \"awq\" is not supported (supported: \"fp8\" with "
              "weight_block_size [128, 128], \"gptq\", \"auto-round\", \"compressed-tensors\", \"modelopt\")");
    EXPECT_EQ(error_of(with("quant_method", nullptr)), "config.json: quantization_config: missing field quant_method");
    EXPECT_EQ(error_of(with("fmt", "e5m2")), "config.json: quantization_config.fmt \"e5m2\" is not supported (only \"e4m3\")");
    EXPECT_EQ(error_of(with("activation_scheme", "static")),
              "config.json: quantization_config.activation_scheme \"static\" is not supported (only \"dynamic\": no "
              "static activation scales)");
    EXPECT_EQ(error_of(with("weight_block_size", json::array({64, 64}))),
              "config.json: quantization_config.weight_block_size must be [128, 128], got [64, 64]");
    EXPECT_EQ(error_of(with("weight_block_size", nullptr)),
              "config.json: quantization_config: no weight_block_size; per-tensor FP8 is not supported (only "
              "128x128 block scales)");
    EXPECT_EQ(error_of(with("weight_block_size", "128")),
              "config.json: quantization_config.weight_block_size must be a list of integers");
    EXPECT_EQ(error_of(with("scale_fmt", "ue8m0")),
              "config.json: quantization_config.scale_fmt \"ue8m0\" is not supported (only \"float\")");
    EXPECT_EQ(error_of(with("modules_to_not_convert", json::array({1}))),
              "config.json: quantization_config.modules_to_not_convert[0] must be a string");
    EXPECT_EQ(error_of(json::array()), "config.json: quantization_config must be an object");
}

TEST(QuantizationConfig, ExcludesMatchesWholeComponents) {
    QuantizationConfig q = fp8_block_quantization(
        {"lm_head", "model.visual", "mlp.gate", "model.language_model.layers.1.linear_attn.in_proj_a", "mtp.layers.*.mlp.gate"});
    EXPECT_TRUE(q.excludes("lm_head"));
    EXPECT_TRUE(q.excludes("model.visual.blocks.0.attn.qkv"));
    EXPECT_TRUE(q.excludes("model.language_model.layers.7.mlp.gate"));
    EXPECT_FALSE(q.excludes("model.language_model.layers.7.mlp.gate_proj"));
    EXPECT_FALSE(q.excludes("model.language_model.layers.7.mlp.shared_expert.gate_proj"));
    EXPECT_TRUE(q.excludes("model.language_model.layers.1.linear_attn.in_proj_a"));
    EXPECT_FALSE(q.excludes("model.language_model.layers.11.linear_attn.in_proj_a"));
    EXPECT_FALSE(q.excludes("model.visualx.blocks"));
    EXPECT_TRUE(q.excludes("mtp.layers.0.mlp.gate"));
    EXPECT_FALSE(q.excludes("mtp.layers.0.mlp.gate_up"));
    EXPECT_FALSE(QuantizationConfig{}.excludes("lm_head"));
}

TEST(QuantizationConfig, RoundTripsThroughModelConfigJson) {
    ModelConfig c = tiny_model_config();
    c.quantization = fp8_block_quantization({"lm_head", "mtp.fc"});
    json j = model_config_to_json(c);
    ASSERT_TRUE(j.contains("quantization_config"));
    EXPECT_EQ(j["quantization_config"]["quant_method"], "fp8");
    EXPECT_EQ(j["quantization_config"]["weight_block_size"], json::array({128, 128}));
    auto back = parse_model_config(j);
    ASSERT_TRUE(back.is_ok()) << back.status().message();
    EXPECT_EQ(*back, c);
    // Inside text_config is accepted too; an unsupported one fails the whole config with its path.
    json nested = model_config_to_json(tiny_model_config());
    nested["text_config"]["quantization_config"] = {{"quant_method", "awq"}};
    auto bad = parse_model_config(nested);
    ASSERT_FALSE(bad.is_ok());
    EXPECT_NE(bad.status().message().find("text_config.quantization_config.quant_method \"awq\""), std::string::npos)
        << bad.status().message();
    EXPECT_FALSE(model_config_to_json(tiny_model_config()).contains("quantization_config"));
}

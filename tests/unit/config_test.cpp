// ModelConfig: both config.json layouts, derived layer types, key precedence, the presets against
// spec §1.2 / §1.4, and the exact content of every parse and validation message.
#include <gtest/gtest.h>

#include <functional>
#include <nlohmann/json.hpp>

#include "config/model_config.h"
#include "test_tmp_dir.h"

using namespace qs;
using json = nlohmann::json;

namespace {

// The text_config of the published Qwen3.6-35B-A3B config.json (spec §1.2), training keys included.
json real_text_config() {
    json lt = json::array();
    for (int i = 0; i < 40; ++i) lt.push_back(i % 4 == 3 ? "full_attention" : "linear_attention");
    return json{{"model_type", "qwen3_5_moe_text"},
                {"hidden_size", 2048},
                {"num_hidden_layers", 40},
                {"layer_types", lt},
                {"full_attention_interval", 4},
                {"num_attention_heads", 16},
                {"num_key_value_heads", 2},
                {"head_dim", 256},
                {"attn_output_gate", true},
                {"attention_bias", false},
                {"attention_dropout", 0.0},
                {"linear_num_key_heads", 16},
                {"linear_num_value_heads", 32},
                {"linear_key_head_dim", 128},
                {"linear_value_head_dim", 128},
                {"linear_conv_kernel_dim", 4},
                {"mamba_ssm_dtype", "float32"},
                {"num_experts", 256},
                {"num_experts_per_tok", 8},
                {"moe_intermediate_size", 512},
                {"shared_expert_intermediate_size", 512},
                {"router_aux_loss_coef", 0.001},
                {"output_router_logits", false},
                {"vocab_size", 248320},
                {"hidden_act", "silu"},
                {"rms_norm_eps", 1e-6},
                {"max_position_embeddings", 262144},
                {"rope_parameters",
                 {{"rope_type", "default"},
                  {"rope_theta", 10000000},
                  {"partial_rotary_factor", 0.25},
                  {"mrope_section", {11, 11, 10}},
                  {"mrope_interleaved", true}}},
                {"partial_rotary_factor", 0.25},
                {"mtp_num_hidden_layers", 1},
                {"mtp_use_dedicated_embeddings", false},
                {"bos_token_id", 248044},
                {"eos_token_id", 248044},
                {"pad_token_id", nullptr},
                {"dtype", "bfloat16"},
                {"initializer_range", 0.02},
                {"tie_word_embeddings", false},
                {"use_cache", true}};
}

json real_nested_config() {
    return json{
        {"architectures", {"Qwen3_5MoeForConditionalGeneration"}},
        {"model_type", "qwen3_5_moe"},
        {"tie_word_embeddings", false},
        {"image_token_id", 248056},
        {"video_token_id", 248057},
        {"vision_start_token_id", 248053},
        {"vision_end_token_id", 248054},
        {"transformers_version", "4.57.1"},
        {"vision_config", {{"model_type", "qwen3_5_moe"}, {"depth", 27}, {"hidden_size", 1152}}},
        {"text_config", real_text_config()}};
}

// The same parameters in the flat layout.
json real_flat_config() {
    json j = real_text_config();
    j["model_type"] = "qwen3_5_moe_text";
    return j;
}

ModelConfig parse_ok(const json& j) {
    Result<ModelConfig> r = parse_model_config(j);
    EXPECT_TRUE(r.is_ok()) << r.status().message();
    return r.is_ok() ? r.value() : ModelConfig{};
}

std::string parse_error(const json& j) {
    Result<ModelConfig> r = parse_model_config(j);
    EXPECT_FALSE(r.is_ok());
    return r.is_ok() ? "" : r.status().message();
}

std::string validate_error(const ModelConfig& c) {
    Status s = c.validate();
    EXPECT_FALSE(s.is_ok());
    return s.is_ok() ? "" : s.message();
}

const char* kTinySpecJson =
    R"({"architectures":["Qwen3_5MoeForConditionalGeneration"],"model_type":"qwen3_5_moe",
 "tie_word_embeddings":false,
 "text_config":{"model_type":"qwen3_5_moe_text","hidden_size":64,"num_hidden_layers":4,
  "layer_types":["linear_attention","linear_attention","linear_attention","full_attention"],
  "num_attention_heads":4,"num_key_value_heads":2,"head_dim":32,"attn_output_gate":true,
  "linear_num_key_heads":2,"linear_num_value_heads":4,"linear_key_head_dim":16,
  "linear_value_head_dim":16,"linear_conv_kernel_dim":4,"mamba_ssm_dtype":"float32",
  "num_experts":8,"num_experts_per_tok":2,"moe_intermediate_size":32,
  "shared_expert_intermediate_size":32,"vocab_size":512,"hidden_act":"silu",
  "rms_norm_eps":1e-6,"max_position_embeddings":4096,"partial_rotary_factor":0.25,
  "rope_parameters":{"rope_type":"default","rope_theta":10000000,"partial_rotary_factor":0.25,
                     "mrope_section":[2,1,1],"mrope_interleaved":true},
  "mtp_num_hidden_layers":1,"mtp_use_dedicated_embeddings":false,"tie_word_embeddings":false}})";

}  // namespace

TEST(ModelConfig, RealNestedConfigMatchesPreset) {
    ModelConfig c = parse_ok(real_nested_config());
    EXPECT_TRUE(c.validate().is_ok()) << c.validate().message();
    // The vision tower's config (the rest from transformers' defaults) and the image token id.
    ASSERT_TRUE(c.vision.has_value());
    EXPECT_EQ(c.vision->depth, 27);
    EXPECT_EQ(c.vision->hidden_size, 1152);
    EXPECT_EQ(c.vision->patch_size, 16);
    EXPECT_EQ(c.image_token_id, 248056);
    c.vision.reset();  // this abbreviated vision_config lacks out_hidden_size (checked below)
    ModelConfig want = qwen36_35b_a3b_config();
    want.vision.reset();
    EXPECT_EQ(c.eos_token_ids,
              std::vector<int64_t>{248044});  // config.json; the preset adds 248046
    want.eos_token_ids = {248044};
    EXPECT_EQ(c, want);
    EXPECT_EQ(c.model_type, "qwen3_5_moe_text");
    EXPECT_EQ(c.pad_token_id, -1);  // null
}

TEST(ModelConfig, PresetVisionTowerIsTheReleaseOne) {
    // spec §1.3, written out here rather than read from VisionConfig's defaults.
    const std::optional<VisionConfig> v = qwen36_35b_a3b_config().vision;
    ASSERT_TRUE(v.has_value());
    EXPECT_EQ(v->depth, 27);
    EXPECT_EQ(v->hidden_size, 1152);
    EXPECT_EQ(v->num_heads, 16);
    EXPECT_EQ(v->intermediate_size, 4304);
    EXPECT_EQ(v->hidden_act, "gelu_pytorch_tanh");
    EXPECT_EQ(v->patch_size, 16);
    EXPECT_EQ(v->temporal_patch_size, 2);
    EXPECT_EQ(v->spatial_merge_size, 2);
    EXPECT_EQ(v->out_hidden_size, 2048);
    EXPECT_EQ(v->num_position_embeddings, 2304);
    EXPECT_FALSE(tiny_model_config().vision.has_value());
}

TEST(ModelConfig, BothLayoutsParseToTheSameStruct) {
    ModelConfig nested = parse_ok(real_nested_config());
    ModelConfig flat = parse_ok(real_flat_config());
    EXPECT_TRUE(nested.vision.has_value());
    EXPECT_FALSE(flat.vision.has_value());  // a flat text config has no tower
    nested.vision.reset();
    EXPECT_EQ(nested, flat);
}

TEST(ModelConfig, PresetDerivedSizesMatchSpec) {
    ModelConfig c = qwen36_35b_a3b_config();
    ASSERT_TRUE(c.validate().is_ok()) << c.validate().message();
    EXPECT_EQ(c.linear_key_dim(), 2048);
    EXPECT_EQ(c.linear_value_dim(), 4096);
    EXPECT_EQ(c.linear_conv_dim(), 8192);
    EXPECT_EQ(c.rotary_dim(), 64);
    EXPECT_EQ(c.q_proj_out(), 8192);
    EXPECT_EQ(c.num_full_attention_layers(), 10);
    EXPECT_EQ(c.num_linear_attention_layers(), 30);
    for (int64_t i = 0; i < 40; ++i) EXPECT_EQ(c.is_full_attention(i), i % 4 == 3) << i;
    EXPECT_EQ(c.eos_token_ids, (std::vector<int64_t>{248046, 248044}));
    EXPECT_EQ(c.bos_token_id, 248044);
    EXPECT_EQ(c.vocab_size, 248320);
    EXPECT_EQ(c.rope_theta, 1e7);
    EXPECT_EQ(c.mrope_section, (std::vector<int64_t>{11, 11, 10}));
}

TEST(ModelConfig, TinyPresetMatchesSpecJson) {
    json j = json::parse(kTinySpecJson);
    ModelConfig c = parse_ok(j);
    EXPECT_EQ(c, tiny_model_config());
    EXPECT_TRUE(c.validate().is_ok()) << c.validate().message();
    EXPECT_EQ(c.rotary_dim(), 8);
    EXPECT_EQ(c.num_full_attention_layers(), 1);
    EXPECT_TRUE(c.is_full_attention(3));
}

TEST(ModelConfig, ToJsonRoundTrips) {
    for (const ModelConfig& c : {qwen36_35b_a3b_config(), tiny_model_config()}) {
        EXPECT_EQ(parse_ok(model_config_to_json(c)), c);
        EXPECT_EQ(parse_ok(json::parse(model_config_to_json(c).dump())), c);
    }
}

TEST(ModelConfig, LayerTypesDerivedFromInterval) {
    json j = real_flat_config();
    j.erase("layer_types");
    ModelConfig c = parse_ok(j);
    ASSERT_EQ(c.layer_types.size(), 40u);
    for (int64_t i = 0; i < 40; ++i) EXPECT_EQ(c.is_full_attention(i), (i + 1) % 4 == 0) << i;

    j["full_attention_interval"] = 3;
    j["num_hidden_layers"] = 7;
    c = parse_ok(j);
    std::vector<LayerType> want;
    for (int i = 0; i < 7; ++i)
        want.push_back(i == 2 || i == 5 ? LayerType::kFullAttention : LayerType::kLinearAttention);
    EXPECT_EQ(c.layer_types, want);
    EXPECT_EQ(c.full_attention_interval, 3);

    j["full_attention_interval"] = 1;
    c = parse_ok(j);
    EXPECT_EQ(c.num_full_attention_layers(), 7);
    // transformers: a negative interval acts as its magnitude (Python's modulo), 0 cannot derive.
    j["full_attention_interval"] = -3;
    EXPECT_EQ(parse_ok(j).layer_types, want);
    j["full_attention_interval"] = 0;
    EXPECT_EQ(parse_error(j), "config.json: full_attention_interval is 0 and layer_types is absent: the layer types "
                              "cannot be derived");

    json nested = real_nested_config();  // the nested layout derives the same way
    nested["text_config"].erase("layer_types");
    EXPECT_EQ(parse_ok(nested).layer_types, qwen36_35b_a3b_config().layer_types);
}

TEST(ModelConfig, Qwen3NextStyleFlatConfig) {
    // Qwen3-Next: flat, no layer_types, legacy rope_theta / rope_scaling / partial_rotary_factor
    // keys.
    json j = real_flat_config();
    j["model_type"] = "qwen3_next";
    j.erase("layer_types");
    j.erase("rope_parameters");
    j.erase("dtype");
    j["rope_theta"] = 10000000;
    j["rope_scaling"] = nullptr;
    j["partial_rotary_factor"] = 0.25;
    j["norm_topk_prob"] = true;
    j["decoder_sparse_step"] = 1;
    j["mlp_only_layers"] = json::array();
    j["torch_dtype"] = "bfloat16";
    j["eos_token_id"] = 151645;
    j["bos_token_id"] = 151643;
    j["vocab_size"] = 151936;
    ModelConfig c = parse_ok(j);
    EXPECT_TRUE(c.validate().is_ok()) << c.validate().message();
    EXPECT_EQ(c.model_type, "qwen3_next");
    EXPECT_EQ(c.layer_types, qwen36_35b_a3b_config().layer_types);
    EXPECT_EQ(c.rope_theta, 1e7);
    EXPECT_EQ(c.rotary_dim(), 64);
    EXPECT_EQ(c.rope_type, "default");
    EXPECT_TRUE(c.mrope_section.empty());
    EXPECT_EQ(c.eos_token_ids, std::vector<int64_t>{151645});
    EXPECT_EQ(c.dtype, "bfloat16");
}

TEST(ModelConfig, PartialRotaryFactorPrecedence) {
    // rope_parameters first, then text_config, then the file's top level.
    json j = real_nested_config();
    j["partial_rotary_factor"] = 0.125;
    j["text_config"]["partial_rotary_factor"] = 0.5;
    j["text_config"]["rope_parameters"]["partial_rotary_factor"] = 0.25;
    EXPECT_EQ(parse_ok(j).partial_rotary_factor, 0.25);
    j["text_config"]["rope_parameters"].erase("partial_rotary_factor");
    EXPECT_EQ(parse_ok(j).partial_rotary_factor, 0.5);
    j["text_config"].erase("partial_rotary_factor");
    EXPECT_EQ(parse_ok(j).partial_rotary_factor, 0.125);
    j.erase("partial_rotary_factor");
    // Absent everywhere: transformers' Qwen3_5MoeTextConfig default (0.25), verified against 5.17.
    EXPECT_EQ(parse_ok(j).partial_rotary_factor, 0.25);
}

TEST(ModelConfig, LegacyRopeKeys) {
    json j = real_flat_config();
    j.erase("rope_parameters");
    j["rope_theta"] = 5000000.0;
    j["rope_scaling"] = {{"type", "mrope"}, {"mrope_section", {11, 11, 10}}};
    ModelConfig c = parse_ok(j);
    EXPECT_EQ(c.rope_theta, 5e6);
    EXPECT_EQ(c.rope_type, "mrope");
    EXPECT_EQ(c.mrope_section, (std::vector<int64_t>{11, 11, 10}));
    EXPECT_FALSE(c.mrope_interleaved);
    EXPECT_TRUE(c.validate().is_ok()) << c.validate().message();
    // rope_parameters wins over rope_scaling and over the plain key.
    j["rope_parameters"] = {{"rope_theta", 1000.0}, {"rope_type", "default"}};
    c = parse_ok(j);
    EXPECT_EQ(c.rope_theta, 1000.0);
    EXPECT_EQ(c.rope_type, "default");
}

TEST(ModelConfig, TokenIdsAndTyingLookup) {
    json j = real_nested_config();
    j["text_config"]["eos_token_id"] = {248046, 248044};
    EXPECT_EQ(parse_ok(j).eos_token_ids, (std::vector<int64_t>{248046, 248044}));
    j["text_config"].erase("eos_token_id");
    j["eos_token_id"] = 7;  // falls back to the top level
    EXPECT_EQ(parse_ok(j).eos_token_ids, std::vector<int64_t>{7});

    j["tie_word_embeddings"] = false;
    j["text_config"]["tie_word_embeddings"] = true;  // text_config wins
    EXPECT_TRUE(parse_ok(j).tie_word_embeddings);
    j["text_config"].erase("tie_word_embeddings");
    j["tie_word_embeddings"] = true;
    EXPECT_TRUE(parse_ok(j).tie_word_embeddings);

    EXPECT_TRUE(parse_ok(j).norm_topk_prob);  // absent → true
    // transformers' qwen3_5_moe router always renormalises: false is ignored (with a warning);
    // qwen3_next reads it.
    j["text_config"]["norm_topk_prob"] = false;
    EXPECT_TRUE(parse_ok(j).norm_topk_prob);
    json next = real_flat_config();
    next["model_type"] = "qwen3_next";
    next["norm_topk_prob"] = false;
    EXPECT_FALSE(parse_ok(next).norm_topk_prob);
}

TEST(ModelConfig, MissingRequiredFieldIsNamed) {
    const char* required[] = {"hidden_size",
                              "num_hidden_layers",
                              "num_attention_heads",
                              "num_key_value_heads",
                              "head_dim",
                              "linear_num_key_heads",
                              "linear_num_value_heads",
                              "linear_key_head_dim",
                              "linear_value_head_dim",
                              "linear_conv_kernel_dim",
                              "num_experts",
                              "num_experts_per_tok",
                              "moe_intermediate_size",
                              "shared_expert_intermediate_size",
                              "vocab_size",
                              "max_position_embeddings"};
    // qwen3_next needs them; qwen3_5_moe takes transformers' defaults (config_acceptance_test).
    for (const char* key : required) {
        json f = real_flat_config();
        f["model_type"] = "qwen3_next";
        f.erase(key);
        EXPECT_EQ(parse_error(f), std::string("config.json: missing field ") + key);
        json j = real_nested_config();
        j["text_config"].erase(key);
        EXPECT_TRUE(parse_model_config(j).is_ok()) << key;
    }
    json j = real_nested_config();
    j.erase("text_config");
    EXPECT_EQ(parse_error(j), "config.json: missing field text_config");
    j = real_flat_config();
    j.erase("model_type");
    EXPECT_EQ(parse_error(j), "config.json: missing field model_type");
}

TEST(ModelConfig, ParseErrorsNameFieldAndProblem) {
    json j = real_nested_config();
    j["text_config"]["hidden_size"] = "2048";
    EXPECT_EQ(parse_error(j), "config.json: text_config.hidden_size must be an integer");
    j = real_nested_config();
    j["text_config"]["hidden_size"] = 2048.5;
    EXPECT_EQ(parse_error(j), "config.json: text_config.hidden_size must be an integer");
    j = real_nested_config();
    j["text_config"]["layer_types"][5] = "sliding_attention";
    EXPECT_EQ(
        parse_error(j),
        "config.json: text_config.layer_types[5] is the layer type \"sliding_attention\", which qwenserve "
        "cannot run (expected linear_attention or full_attention)");
    j = real_nested_config();
    j["text_config"]["layer_types"][2] = 3;
    EXPECT_EQ(parse_error(j), "config.json: text_config.layer_types[2] must be a string");
    j = real_nested_config();
    j["text_config"]["eos_token_id"] = {1, "x"};
    EXPECT_EQ(parse_error(j), "config.json: text_config.eos_token_id[1] must be an integer");
    j = real_nested_config();
    j["text_config"]["attention_bias"] = 0;
    EXPECT_EQ(parse_error(j), "config.json: text_config.attention_bias must be true or false");
    j = real_nested_config();
    j["text_config"]["rope_parameters"]["rope_theta"] = "big";
    EXPECT_EQ(parse_error(j),
              "config.json: text_config.rope_parameters.rope_theta must be a number");
    j = real_nested_config();
    j["text_config"] = 5;
    EXPECT_EQ(parse_error(j), "config.json: text_config must be an object");
    j = real_nested_config();
    j["text_config"]["mlp_only_layers"] = {0};
    EXPECT_EQ(
        parse_error(j),
        "config.json: text_config.mlp_only_layers is not empty; dense MLP layers are unsupported");
    EXPECT_EQ(parse_error(json::array()), "config.json: the document is not a JSON object");
}

TEST(ModelConfig, ValidationMessages) {
    struct Case {
        std::function<void(ModelConfig&)> mutate;
        std::string message;
    };
    const Case cases[] = {
        {[](ModelConfig& c) { c.layer_types.pop_back(); },
         "layer_types has 39 entries but num_hidden_layers is 40"},
        {[](ModelConfig& c) { c.num_key_value_heads = 3; },
         "num_attention_heads (16) is not a multiple of num_key_value_heads (3)"},
        {[](ModelConfig& c) { c.linear_num_key_heads = 5; },
         "linear_num_value_heads (32) is not a multiple of linear_num_key_heads (5)"},
        {[](ModelConfig& c) { c.num_experts = 8, c.num_experts_per_tok = 9; },
         "num_experts_per_tok (9) exceeds num_experts (8)"},
        {[](ModelConfig& c) { c.hidden_size = 0; }, "hidden_size must be positive (got 0)"},
        {[](ModelConfig& c) { c.vocab_size = -5; }, "vocab_size must be positive (got -5)"},
        {[](ModelConfig& c) { c.moe_intermediate_size = 0; },
         "moe_intermediate_size must be positive (got 0)"},
        {[](ModelConfig& c) { c.rms_norm_eps = -1e-6; }, "rms_norm_eps must be >= 0 and finite (got -1e-06)"},
        {[](ModelConfig& c) { c.rope_theta = -1; }, "rope_theta must be positive (got -1)"},
        {[](ModelConfig& c) { c.partial_rotary_factor = 0; },
         "partial_rotary_factor must be positive (got 0)"},
        {[](ModelConfig& c) { c.partial_rotary_factor = 1.5; },
         "rotary dim (384) exceeds head_dim (256): partial_rotary_factor is 1.5"},
        {[](ModelConfig& c) { c.partial_rotary_factor = 0.3; },
         "rotary dim head_dim * partial_rotary_factor = 256 * 0.3 = 76.8 is not an integer"},
        {[](ModelConfig& c) { c.head_dim = 36; }, "rotary dim (9) must be even"},
        {[](ModelConfig& c) { c.rope_type = "yarn"; },
         "rope_type \"yarn\" is unsupported (only default RoPE is implemented, no scaling)"},
        {[](ModelConfig& c) { c.hidden_act = "gelu"; },
         "hidden_act \"gelu\" is unsupported (only silu)"},
        {[](ModelConfig& c) { c.attention_bias = true; },
         "attention_bias true is unsupported (the model has no biases)"},
        {[](ModelConfig& c) { c.model_type = "llama"; },
         "model_type \"llama\" is not supported (expected qwen3_5_moe, qwen3_5_moe_text or "
         "qwen3_next)"},
        {[](ModelConfig& c) { c.mtp_num_hidden_layers = -1; },
         "mtp_num_hidden_layers must not be negative (got -1)"},
        {[](ModelConfig& c) { c.mtp_use_dedicated_embeddings = true; },
         "mtp_use_dedicated_embeddings true is unsupported (MTP shares embed_tokens)"},
        {[](ModelConfig& c) { c.attn_output_gate = false; },
         "attn_output_gate false is unsupported (the attention always has its output gate)"},
    };
    for (const Case& k : cases) {
        ModelConfig c = qwen36_35b_a3b_config();
        k.mutate(c);
        EXPECT_EQ(validate_error(c), k.message);
    }
    // Accepted with a warning (transformers loads them): M-RoPE sections that do not split the
    // rotary frequencies (HF's own tiny test config: head_dim 8, factor 0.25 → rotary 2 with
    // [16, 8, 8]), special tokens outside the vocabulary.
    ModelConfig t = tiny_model_config();
    t.head_dim = 8;
    t.mrope_section = {16, 8, 8};
    t.eos_token_ids = {600};
    t.bos_token_id = -2;
    std::vector<std::string> warnings;
    EXPECT_TRUE(t.validate(&warnings).is_ok());
    ASSERT_EQ(warnings.size(), 3u);
    EXPECT_EQ(warnings[0], "mrope_section [16, 8, 8] (sum 32, rotary_dim/2 1) is not a split of the rotary "
                           "frequencies; it is ignored: text positions do not depend on it");
    EXPECT_EQ(warnings[1], "bos_token_id -2 is outside the vocabulary (vocab_size 512): it is never produced");
    EXPECT_EQ(warnings[2], "eos_token_id 600 is outside the vocabulary (vocab_size 512): it is never produced");
    warnings.clear();
    EXPECT_TRUE(tiny_model_config().validate(&warnings).is_ok());
    EXPECT_TRUE(warnings.empty());
}

TEST(ModelConfig, LoadFromFileOrDirectoryNamesTheFile) {
    qs::testing::TmpDir dir;
    std::string path = dir.write("config.json", real_nested_config().dump(2));
    Result<ModelConfig> by_dir = load_model_config(dir.path());
    ASSERT_TRUE(by_dir.is_ok()) << by_dir.status().message();
    Result<ModelConfig> by_file = load_model_config(path);
    ASSERT_TRUE(by_file.is_ok()) << by_file.status().message();
    EXPECT_EQ(by_dir.value(), by_file.value());

    Result<ModelConfig> missing = load_model_config(dir.file("nope.json"));
    ASSERT_FALSE(missing.is_ok());
    EXPECT_EQ(missing.status().kind(), ErrorKind::kNotFound);
    EXPECT_NE(missing.status().message().find(dir.file("nope.json")), std::string::npos);

    std::string bad = dir.write("bad.json", "{\"model_type\": ");
    Result<ModelConfig> r = load_model_config(bad);
    ASSERT_FALSE(r.is_ok());
    EXPECT_EQ(r.status().message(), bad + ": not valid JSON");

    json j = real_nested_config();
    j["text_config"]["head_dim"] = "256";  // (absent, it would take transformers' default)
    std::string no_head = dir.write("no_head.json", j.dump());
    r = load_model_config(no_head);
    ASSERT_FALSE(r.is_ok());
    EXPECT_EQ(r.status().message(), no_head + ": text_config.head_dim must be an integer");

    j = real_nested_config();
    j["text_config"]["num_experts_per_tok"] = 300;
    std::string invalid = dir.write("invalid.json", j.dump());
    r = load_model_config(invalid);
    ASSERT_FALSE(r.is_ok());
    EXPECT_EQ(r.status().message(),
              invalid + ": num_experts_per_tok (300) exceeds num_experts (256)");
}

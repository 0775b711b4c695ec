// Quantised checkpoints: GPTQ/AutoRound (auto_gptq packing), compressed-tensors (pack-quantized
// INT4, nvfp4-pack-quantized) and ModelOpt NVFP4 (MIXED_PRECISION with FP8 attention). Each
// fixture of tests/data/quant (tools/make_quant_fixtures.py: quantised and dequantised by
// compressed-tensors, nvidia-modelopt and auto-round on the CPU) loads; every linear's
// dequantisation equals the reference library's (the fixture's dense/ copy) bit for bit; the
// forward's logits equal the dense copy's exactly; a bad or inconsistent quantization_config is
// an error that names the field.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "backend/cpu/cpu_ops.h"
#include "config/quantization_config.h"
#include "linear_walk.h"
#include "model/single_sequence.h"
#include "test_util.h"

using namespace qs;
using qs::test::for_each_linear;
namespace fs = std::filesystem;

namespace {

std::string fixture(const std::string& name) { return test::source_path("tests/data/quant/" + name); }

std::vector<float> logits_of(const ModelWeights& w, const std::vector<int32_t>& ids) {
    CpuOps ops;
    Qwen36Model model(w, ops);
    SingleSequence seq(model, int64_t(ids.size()));
    return seq.feed(ids, true);
}

struct Expect {
    std::string name;
    WeightFormat expert, attention, gdn;  // layer-1 expert 0 gate, layer-1 q_proj, layer-0 in_proj_qkv
};

void PrintTo(const Expect& e, std::ostream* os) { *os << e.name; }

class QuantFixture : public ::testing::TestWithParam<Expect> {};

TEST_P(QuantFixture, LoadsWithTheFormatPerModule) {
    const Expect& x = GetParam();
    auto w = load_model_dir(fixture(x.name));
    ASSERT_TRUE(w.is_ok()) << w.status().message();
    EXPECT_EQ(w->layers[1].moe.experts[0].gate_proj.format, x.expert);
    EXPECT_EQ(w->layers[1].attn.q_proj.format, x.attention);
    EXPECT_EQ(w->layers[0].gdn.in_proj_qkv.format, x.gdn);
    // Kept 16-bit in every fixture: router, shared-expert gate, GDN a/b, lm_head, the whole MTP
    // block (BF16 with fused 3-D experts beside the low-bit main experts).
    EXPECT_EQ(w->layers[0].moe.router.format, WeightFormat::kDense);
    EXPECT_EQ(w->layers[0].moe.shared_expert_gate.format, WeightFormat::kDense);
    EXPECT_EQ(w->layers[0].gdn.in_proj_a.format, WeightFormat::kDense);
    EXPECT_EQ(w->lm_head.format, WeightFormat::kDense);
    ASSERT_TRUE(w->mtp.present);
    EXPECT_EQ(w->mtp.fc.format, WeightFormat::kDense);
    EXPECT_EQ(w->mtp.layer.moe.experts[0].gate_proj.format, WeightFormat::kDense);
    EXPECT_EQ(w->mtp.layer.attn.q_proj.format, WeightFormat::kDense);
}

TEST_P(QuantFixture, DequantisationEqualsReferenceLibraryBitForBit) {
    auto q = load_model_dir(fixture(GetParam().name));
    auto d = load_model_dir(fixture(GetParam().name + "/dense"));
    ASSERT_TRUE(q.is_ok()) << q.status().message();
    ASSERT_TRUE(d.is_ok()) << d.status().message();
    std::vector<std::pair<std::string, const LinearWeight*>> lq, ld;
    for_each_linear(*q, [&](const std::string& n, const LinearWeight& w) { lq.emplace_back(n, &w); });
    for_each_linear(*d, [&](const std::string& n, const LinearWeight& w) { ld.emplace_back(n, &w); });
    ASSERT_EQ(lq.size(), ld.size());
    int quantised = 0;
    for (size_t i = 0; i < lq.size(); ++i) {
        const LinearWeight &a = *lq[i].second, &b = *ld[i].second;
        ASSERT_EQ(a.out_features, b.out_features) << lq[i].first;
        ASSERT_EQ(a.in_features, b.in_features) << lq[i].first;
        quantised += a.format != WeightFormat::kDense;
        std::vector<float> ra(size_t(a.in_features)), rb(size_t(b.in_features));
        for (int64_t r = 0; r < a.out_features; ++r) {
            a.row_to_f32(r, ra.data());
            b.row_to_f32(r, rb.data());
            for (int64_t c = 0; c < a.in_features; ++c)
                ASSERT_EQ(f32_to_bits(ra[size_t(c)]), f32_to_bits(rb[size_t(c)]))
                    << lq[i].first << " (" << weight_format_name(a.format) << ") row " << r << " col " << c << ": "
                    << ra[size_t(c)] << " vs reference " << rb[size_t(c)];
        }
    }
    EXPECT_GT(quantised, 20);  // 2 layers x (4 experts x 3 + attention or GDN linears)
}

TEST_P(QuantFixture, LogitsEqualTheDequantisedDenseModel) {
    auto q = load_model_dir(fixture(GetParam().name));
    auto d = load_model_dir(fixture(GetParam().name + "/dense"));
    ASSERT_TRUE(q.is_ok()) << q.status().message();
    ASSERT_TRUE(d.is_ok()) << d.status().message();
    std::vector<int32_t> ids;
    for (int i = 0; i < 12; ++i) ids.push_back((i * 37 + 5) % 256);
    const std::vector<float> a = logits_of(*q, ids), b = logits_of(*d, ids);
    ASSERT_EQ(a.size(), b.size());
    EXPECT_EQ(a, b);
    bool finite = true;
    for (float v : a) finite = finite && std::isfinite(v);
    EXPECT_TRUE(finite);
}

INSTANTIATE_TEST_SUITE_P(
    Formats, QuantFixture,
    ::testing::Values(Expect{"ct_int4", WeightFormat::kIntGroup, WeightFormat::kIntGroup, WeightFormat::kIntGroup},
                      Expect{"ct_nvfp4", WeightFormat::kNvfp4, WeightFormat::kNvfp4, WeightFormat::kNvfp4},
                      Expect{"modelopt_nvfp4", WeightFormat::kNvfp4, WeightFormat::kFP8Block, WeightFormat::kNvfp4},
                      Expect{"autoround_int4", WeightFormat::kIntGroup, WeightFormat::kIntGroup,
                             WeightFormat::kIntGroup},
                      Expect{"gptq_act_order", WeightFormat::kIntGroup, WeightFormat::kIntGroup,
                             WeightFormat::kIntGroup}),
    [](const ::testing::TestParamInfo<Expect>& i) { return i.param.name; });

TEST(QuantFormats, AutoRoundExtraConfigSetsBitsPerModule) {
    auto w = load_model_dir(fixture("autoround_int4"));
    ASSERT_TRUE(w.is_ok()) << w.status().message();
    const LinearWeight& q = w->layers[1].attn.q_proj;  // extra_config: bits 8, group 32, asym
    EXPECT_EQ(q.int_params.bits, 8);
    EXPECT_EQ(q.int_params.group_size, 32);
    EXPECT_NE(q.zeros.data, nullptr);
    const LinearWeight& e = w->layers[1].moe.experts[2].down_proj;  // defaults: 4 bits, group 16, sym
    EXPECT_EQ(e.int_params.bits, 4);
    EXPECT_EQ(e.int_params.group_size, 16);
    EXPECT_EQ(e.zeros.data, nullptr);
    EXPECT_EQ(w->layers[0].moe.shared_expert.up_proj.format, WeightFormat::kDense);  // extra_config bits 16
}

TEST(QuantFormats, GptqActOrderKeepsGIdx) {
    auto w = load_model_dir(fixture("gptq_act_order"));
    ASSERT_TRUE(w.is_ok()) << w.status().message();
    EXPECT_NE(w->layers[0].moe.experts[0].gate_proj.g_idx.data, nullptr);
    EXPECT_EQ(w->layers[0].moe.experts[0].gate_proj.int_params.zero_offset, 1);  // v1: stored zero - 1
}

// ---------------------------------------------------------------- errors
class QuantErrors : public ::testing::Test {
protected:
    void SetUp() override {
        dir_ = (fs::temp_directory_path() / ("qs_quant_test_" + std::to_string(::getpid()))).string();
        fs::remove_all(dir_);
    }
    void TearDown() override { fs::remove_all(dir_); }

    // A copy of fixture `name` with its quantization_config edited; the load's error message.
    std::string load_error(const std::string& name, const std::function<void(nlohmann::json&)>& edit) {
        fs::create_directories(dir_);
        fs::copy(fixture(name), dir_, fs::copy_options::recursive | fs::copy_options::overwrite_existing);
        std::ifstream in(dir_ + "/config.json");
        nlohmann::json j = nlohmann::json::parse(in);
        edit(j["quantization_config"]);
        std::ofstream(dir_ + "/config.json") << j.dump(2);
        auto w = load_model_dir(dir_);
        fs::remove_all(dir_);
        return w.is_ok() ? std::string("(loaded)") : w.status().message();
    }
    std::string dir_;
};

#define EXPECT_MSG(msg, ...)                                                              \
    do {                                                                                  \
        const std::string m_ = (msg);                                                     \
        for (const char* s_ : {__VA_ARGS__}) EXPECT_NE(m_.find(s_), std::string::npos) << s_ << " not in: " << m_; \
    } while (0)

TEST_F(QuantErrors, UnknownFieldValuesAreNamed) {
    EXPECT_MSG(load_error("autoround_int4", [](auto& q) { q["bits"] = 3; }), "quantization_config.bits", "3");
    EXPECT_MSG(load_error("autoround_int4", [](auto& q) { q["packing_format"] = "auto_round:auto_awq"; }),
               "quantization_config.packing_format");
    EXPECT_MSG(load_error("autoround_int4", [](auto& q) { q["data_type"] = "nv_fp"; }), "quantization_config.data_type");
    EXPECT_MSG(load_error("gptq_act_order", [](auto& q) { q["checkpoint_format"] = "marlin"; }),
               "quantization_config.checkpoint_format");
    EXPECT_MSG(load_error("ct_int4", [](auto& q) { q["config_groups"]["group_0"]["weights"]["strategy"] = "tensor"; }),
               "quantization_config.config_groups.group_0.weights.strategy");
    EXPECT_MSG(load_error("ct_int4", [](auto& q) { q["config_groups"]["group_0"]["format"] = "marlin-24"; }),
               "quantization_config.config_groups.group_0");
    EXPECT_MSG(load_error("ct_int4", [](auto& q) { q["kv_cache_scheme"] = {{"num_bits", 8}}; }),
               "quantization_config.kv_cache_scheme");
    EXPECT_MSG(load_error("ct_int4", [](auto& q) {
                   q["config_groups"]["group_0"]["input_activations"] = {{"num_bits", 8}, {"type", "int"}};
               }),
               "quantization_config.config_groups.group_0.input_activations");
    EXPECT_MSG(load_error("modelopt_nvfp4", [](auto& q) { q["quant_algo"] = "W4A8_AWQ"; }),
               "quantization_config.quant_algo");
    EXPECT_MSG(load_error("modelopt_nvfp4",
                          [](auto& q) { q["quantized_layers"]["model.layers.1.self_attn.q_proj"]["quant_algo"] = "INT8"; }),
               "quantization_config.quantized_layers[\"model.layers.1.self_attn.q_proj\"].quant_algo");
    EXPECT_MSG(load_error("ct_nvfp4", [](auto& q) { q["quant_method"] = "awq"; }), "quantization_config.quant_method",
               "awq");
}

TEST_F(QuantErrors, ConfigInconsistentWithTheTensorsIsNamed) {
    // Group size 32 where the tensors hold one scale per 16 inputs.
    EXPECT_MSG(load_error("ct_int4", [](auto& q) { q["config_groups"]["group_0"]["weights"]["group_size"] = 32; }),
               "weight_scale has shape", "the config implies");
    // Symmetric declared, but the attention tensors carry zero points.
    EXPECT_MSG(load_error("ct_int4", [](auto& q) { q["config_groups"]["group_1"]["weights"]["symmetric"] = true; }),
               "weight_zero_point exists", "quantization_config.config_groups.group_1.weights");
    // MTP no longer ignored: its BF16 linears contradict the config.
    EXPECT_MSG(load_error("ct_nvfp4", [](auto& q) { q["ignore"].erase(q["ignore"].size() - 1); }),
               "module mtp.fc is stored as a float mtp.fc.weight", "quantization_config.config_groups.group_0");
    // A quantised module listed as unquantised.
    EXPECT_MSG(load_error("modelopt_nvfp4", [](auto& q) { q["exclude_modules"].push_back("*experts.1.*"); }),
               "model.layers.0.mlp.experts.1.gate_proj is stored as NVFP4", "exclude_modules");
    // 4 bits declared for an 8-bit module.
    EXPECT_MSG(load_error("autoround_int4",
                          [](auto& q) { q["extra_config"]["model.layers.1.self_attn.k_proj"]["bits"] = 4; }),
               "model.layers.1.self_attn.k_proj.qweight has shape");
    // desc_act without g_idx tensors is refused; act-order tensors with 8 bits are mis-shaped.
    EXPECT_MSG(load_error("autoround_int4", [](auto& q) { q["desc_act"] = true; }), "desc_act", "g_idx");
    EXPECT_MSG(load_error("gptq_act_order", [](auto& q) { q["sym"] = true; }), "qzeros holds zero codes",
               "sym true");
}

TEST(QuantFormats, ParsedConfigSaysWhatEachModuleIs) {
    auto parse = [](const char* text) {
        auto q = parse_quantization_config(nlohmann::json::parse(text), "quantization_config");
        EXPECT_TRUE(q.is_ok()) << q.status().message();
        return q.is_ok() ? *q : QuantizationConfig{};
    };
    const QuantizationConfig ar = parse(R"({"quant_method": "auto-round", "bits": 4, "group_size": 128, "sym": true,
        "packing_format": "auto_round:auto_gptq", "block_name_to_quantize": "model.language_model.layers",
        "extra_config": {"model.language_model.layers.0.mlp.shared_expert.down_proj": {"bits": 16},
                         "model.language_model.layers.3.self_attn.o_proj": {"bits": 8, "sym": false}}})");
    using K = ModuleQuant::Kind;
    EXPECT_EQ(ar.module_quant("model.language_model.layers.5.mlp.experts.7.up_proj").kind, K::kIntGroup);
    EXPECT_EQ(ar.module_quant("model.language_model.layers.0.mlp.shared_expert.down_proj").kind, K::kUnquantized);
    EXPECT_EQ(ar.module_quant("model.language_model.layers.3.self_attn.o_proj").bits, 8);
    EXPECT_FALSE(ar.module_quant("model.language_model.layers.3.self_attn.o_proj").sym);
    EXPECT_EQ(ar.module_quant("mtp.layers.0.mlp.experts.0.up_proj").kind, K::kUnquantized);
    EXPECT_EQ(ar.module_quant("lm_head").kind, K::kUnquantized);

    const QuantizationConfig mo = parse(R"({"quant_method": "modelopt", "quant_algo": "NVFP4",
        "exclude_modules": ["lm_head", "mtp*", "*mlp.gate"]})");
    EXPECT_EQ(mo.module_quant("model.layers.0.mlp.experts.0.up_proj").kind, K::kNvfp4);
    EXPECT_EQ(mo.module_quant("model.layers.0.mlp.gate").kind, K::kUnquantized);
    EXPECT_EQ(mo.module_quant("mtp.fc").kind, K::kUnquantized);

    const QuantizationConfig ct = parse(R"({"quant_method": "compressed-tensors", "format": "pack-quantized",
        "config_groups": {"g": {"targets": ["Linear"], "weights": {"num_bits": 4, "type": "int", "symmetric": true,
        "strategy": "group", "group_size": 128}}}, "ignore": ["lm_head", "re:.*mlp.gate$"]})");
    EXPECT_EQ(ct.module_quant("model.layers.0.mlp.gate").kind, K::kUnquantized);
    EXPECT_EQ(ct.module_quant("model.layers.0.mlp.gate_proj").kind, K::kIntGroup);
    EXPECT_EQ(ct.module_quant("model.layers.0.mlp.gate_proj").group_size, 128);
}

}  // namespace

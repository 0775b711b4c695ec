// Config loading against transformers 5.17, case by case: tests/data/config/
// transformers_acceptance.json (made by tools/config_acceptance_fixture.py, which loads each
// variant of models/qwen36-tiny/config.json with AutoConfig.from_pretrained) says whether
// transformers accepts it and what values it resolves. We must refuse what it refuses, accept
// what it accepts (with the same values) unless qwenserve cannot run the config — those cases are
// listed here with the field the message must name — and warn where we ignore a field.
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "../common/test_files.h"
#include "config/model_config.h"

namespace qs {
namespace {

using json = nlohmann::json;

json fixture() {
    return json::parse(qs::test::read_fixture(std::string(QS_SOURCE_DIR) + "/tests/data/config/transformers_acceptance.json"));
}

// Accepted by transformers, refused by qwenserve: the field the message names. Each is a config
// our forward cannot compute (see model_config_validate.cpp for the reasons).
const std::map<std::string, std::string> kCannotRun = {
    {"rope_type_yarn", "rope_type"},
    {"rope_type_linear", "rope_type"},
    {"rope_type_unknown", "rope_type"},
    {"rope_theta_zero", "rope_theta"},
    {"rope_theta_negative", "rope_theta"},
    {"rope_theta_string", "rope_theta"},
    {"partial_rotary_factor_non_integer_dim", "partial_rotary_factor"},
    {"partial_rotary_factor_above_one", "partial_rotary_factor"},
    {"layer_types_unknown_entry", "layer_types"},
    {"hidden_size_zero", "hidden_size"},
    {"num_experts_per_tok_above_num_experts", "num_experts_per_tok"},
    {"num_attention_heads_not_multiple_of_kv", "num_attention_heads"},
    {"linear_value_heads_not_multiple_of_key", "linear_num_value_heads"},
    {"hidden_act_gelu", "hidden_act"},
    {"attention_bias_true", "attention_bias"},
    {"model_type_other", "model_type"},
};

// Accepted with a warning that names this field.
const std::map<std::string, std::string> kWarns = {
    {"mrope_section_sum_below_half_rotary", "mrope_section"},
    {"mrope_section_sum_above_half_rotary", "mrope_section"},
    {"mrope_section_two_entries", "mrope_section"},
    {"mrope_section_negative_entry", "mrope_section"},
    {"bos_token_id_outside_vocab", "bos_token_id"},
    {"eos_token_id_outside_vocab", "eos_token_id"},
    {"mamba_ssm_dtype_bogus", "mamba_ssm_dtype"},
    {"mtp_num_hidden_layers_negative", "mtp_num_hidden_layers"},
    {"mtp_use_dedicated_embeddings_true", "mtp_use_dedicated_embeddings"},
    {"attn_output_gate_false", "attn_output_gate"},
    {"norm_topk_prob_false", "norm_topk_prob"},
    {"flat_norm_topk_prob_false", "norm_topk_prob"},
};

std::vector<int64_t> id_list(const json& v) {
    if (v.is_null()) return {};
    if (v.is_array()) return v.get<std::vector<int64_t>>();
    return {v.get<int64_t>()};
}

// Our parse against transformers' resolved values.
void expect_same_values(const std::string& name, const ModelConfig& c, const json& r) {
    const std::pair<const char*, int64_t> ints[] = {
        {"vocab_size", c.vocab_size},
        {"hidden_size", c.hidden_size},
        {"num_hidden_layers", c.num_hidden_layers},
        {"num_attention_heads", c.num_attention_heads},
        {"num_key_value_heads", c.num_key_value_heads},
        {"head_dim", c.head_dim},
        {"linear_num_key_heads", c.linear_num_key_heads},
        {"linear_num_value_heads", c.linear_num_value_heads},
        {"linear_key_head_dim", c.linear_key_head_dim},
        {"linear_value_head_dim", c.linear_value_head_dim},
        {"linear_conv_kernel_dim", c.linear_conv_kernel_dim},
        {"num_experts", c.num_experts},
        {"num_experts_per_tok", c.num_experts_per_tok},
        {"moe_intermediate_size", c.moe_intermediate_size},
        {"shared_expert_intermediate_size", c.shared_expert_intermediate_size},
        {"max_position_embeddings", c.max_position_embeddings},
    };
    for (const auto& [key, ours] : ints) EXPECT_EQ(ours, r[key].get<int64_t>()) << name << ": " << key;
    EXPECT_EQ(c.rms_norm_eps, r["rms_norm_eps"].get<double>()) << name;
    EXPECT_EQ(c.tie_word_embeddings, r["tie_word_embeddings"].get<bool>()) << name;
    std::vector<std::string> types;
    for (LayerType t : c.layer_types) types.push_back(layer_type_name(t));
    EXPECT_EQ(types, r["layer_types"].get<std::vector<std::string>>()) << name;
    EXPECT_EQ(c.bos_token_id, r["bos_token_id"].is_null() ? -1 : r["bos_token_id"].get<int64_t>()) << name;
    EXPECT_EQ(c.pad_token_id, r["pad_token_id"].is_null() ? -1 : r["pad_token_id"].get<int64_t>()) << name;
    EXPECT_EQ(c.eos_token_ids, id_list(r["eos_token_id"])) << name;
    EXPECT_EQ(c.rope_theta, r["rope_theta"].get<double>()) << name;
    EXPECT_EQ(c.partial_rotary_factor, r["partial_rotary_factor"].get<double>()) << name;
    EXPECT_EQ(c.rope_type, r["rope_type"].get<std::string>()) << name;
    EXPECT_EQ(c.mrope_section, r["mrope_section"].is_null() ? std::vector<int64_t>{}
                                                            : r["mrope_section"].get<std::vector<int64_t>>())
        << name;
}

TEST(ConfigAcceptance, FollowsTransformers517CaseByCase) {
    const json doc = fixture();
    ASSERT_EQ(doc["transformers"], "5.17.0");
    ASSERT_GE(doc["cases"].size(), 40u);
    std::set<std::string> seen;
    for (const json& k : doc["cases"]) {
        const std::string name = k["name"];
        seen.insert(name);
        std::vector<std::string> warnings;
        Result<ModelConfig> c = parse_model_config(k["config"], "config.json", &warnings);
        Status st = c.is_ok() ? c->validate(&warnings) : c.status();
        if (!k["transformers_accepts"].get<bool>()) {
            EXPECT_FALSE(st.is_ok()) << name << ": transformers refuses it (" << k["error"] << ")";
            continue;
        }
        if (auto it = kCannotRun.find(name); it != kCannotRun.end()) {
            ASSERT_FALSE(st.is_ok()) << name << ": listed as not runnable but accepted";
            EXPECT_NE(st.message().find(it->second), std::string::npos) << name << ": " << st.message();
            continue;
        }
        ASSERT_TRUE(st.is_ok()) << name << ": transformers accepts it; we said: " << st.message();
        if (!k["resolved"].is_null()) expect_same_values(name, *c, k["resolved"]);
        if (auto it = kWarns.find(name); it != kWarns.end()) {
            bool named = false;
            for (const auto& w : warnings) named |= w.find(it->second) != std::string::npos;
            EXPECT_TRUE(named) << name << ": no warning names " << it->second;
        } else if (name == "base" || name == "flat_text_config") {
            EXPECT_TRUE(warnings.empty()) << name << ": " << (warnings.empty() ? "" : warnings[0]);
        }
    }
    for (const auto& m : {kCannotRun, kWarns})
        for (const auto& [name, field] : m) EXPECT_EQ(seen.count(name), 1u) << name << " is not in the fixture";
}

}  // namespace
}  // namespace qs

// QuantizationConfig: the `quantization_config` object of a checkpoint's config.json, parsed and
// validated once at load. Only what qwenserve can run is accepted: none, or block-scaled FP8 as in
// Qwen's official FP8 checkpoints (spec §4.2: quant_method "fp8", fmt "e4m3", dynamic
// activations, weight_block_size [128, 128]). Anything else is an error naming the field.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "core/status.h"

namespace qs {

enum class QuantMethod : uint8_t {
    kNone,      // no quantization_config: every weight is F32/F16/BF16
    kFP8Block,  // quant_method "fp8" with weight_block_size [128, 128]
};

struct QuantizationConfig {
    QuantMethod method = QuantMethod::kNone;
    // Modules (names without the ".weight" suffix) that stay unquantised. An entry names a module
    // or a dotted part of one: "lm_head", "model.visual", "layers.0.mlp.gate" ('*' matches any
    // run of characters). The checkpoint's tensor dtypes decide each module's format; this list is
    // checked against them (an F8 weight in a listed module is an error).
    std::vector<std::string> modules_to_not_convert;

    bool quantized() const { return method != QuantMethod::kNone; }
    // True when `module` is covered by an entry of modules_to_not_convert: the entry equals the
    // module or a run of its dot-separated components ("mlp.gate" covers
    // "model.layers.0.mlp.gate" but not "model.layers.0.mlp.gate_proj").
    bool excludes(std::string_view module) const;

    bool operator==(const QuantizationConfig&) const = default;
};

// The FP8 block configuration (method kFP8Block) with the given exclusions.
QuantizationConfig fp8_block_quantization(std::vector<std::string> modules_to_not_convert = {});

// Parses a `quantization_config` JSON value; `where` names it in messages
// ("config.json: quantization_config.weight_block_size must be [128, 128], got [64, 64]").
Result<QuantizationConfig> parse_quantization_config(const nlohmann::json& j, const std::string& where);

// The config.json object for `q` (quant_method, fmt, activation_scheme, weight_block_size,
// modules_to_not_convert), as Qwen's FP8 releases write it. Requires q.quantized().
nlohmann::json quantization_config_to_json(const QuantizationConfig& q);

}  // namespace qs

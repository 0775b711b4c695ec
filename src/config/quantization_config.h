// QuantizationConfig: the `quantization_config` object of a checkpoint's config.json, parsed and
// validated once at load. Only what qwenserve can run is accepted (spec §4): none; block-scaled
// FP8 as in Qwen's official FP8 checkpoints (quant_method "fp8", fmt "e4m3", dynamic activations,
// weight_block_size [128, 128]); GPTQ and AutoRound with the auto_gptq packing ("gptq",
// "auto-round"); compressed-tensors pack-quantized INT4/INT8 and nvfp4-pack-quantized
// ("compressed-tensors"); ModelOpt NVFP4 / FP8 per tensor / MIXED_PRECISION ("modelopt").
// Anything else is an error naming the field. `module_quant` says what each linear module is
// stored as; the loader checks the checkpoint's tensors against it.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "core/status.h"

namespace qs {

enum class QuantMethod : uint8_t {
    kNone,               // no quantization_config: every weight is F32/F16/BF16
    kFP8Block,           // quant_method "fp8" with weight_block_size [128, 128]
    kGptq,               // quant_method "gptq" or "auto-round" (auto_gptq packing)
    kCompressedTensors,  // quant_method "compressed-tensors"
    kModelOpt,           // quant_method "modelopt"
};

// What quantization_config says one linear module is stored as.
struct ModuleQuant {
    enum class Kind : uint8_t {
        kUnquantized,  // F32/F16/BF16 `.weight`
        kFP8Block,     // Qwen FP8: `.weight` F8_E4M3 + `.weight_scale_inv`
        kIntGroup,     // grouped integers (packing by method: GPTQ qweight/qzeros/scales or
                       // compressed-tensors weight_packed/weight_scale/weight_zero_point)
        kNvfp4,        // ModelOpt weight/weight_scale/weight_scale_2 or compressed-tensors
                       // weight_packed/weight_scale/weight_global_scale
        kFP8Tensor,    // ModelOpt FP8: `.weight` F8_E4M3 + scalar `.weight_scale`
    };
    Kind kind = Kind::kUnquantized;
    int bits = 16;
    int64_t group_size = 0;  // -1: one group per row (compressed-tensors strategy "channel")
    bool sym = true;
    bool act_order = false;  // GPTQ desc_act / compressed-tensors actorder: a g_idx tensor
    std::string origin;      // the config field that decided it, for messages

    bool operator==(const ModuleQuant&) const = default;
};

// One group of a compressed-tensors config_groups entry, or the defaults of a GPTQ/AutoRound
// config; `targets` are compressed-tensors targets ("Linear", exact module names, "re:REGEX").
struct QuantScheme {
    std::string name;
    std::vector<std::string> targets;
    ModuleQuant quant;
    bool operator==(const QuantScheme&) const = default;
};

struct QuantizationConfig {
    QuantMethod method = QuantMethod::kNone;
    // Modules (names without the ".weight" suffix) that stay unquantised. An entry names a module
    // or a dotted part of one: "lm_head", "model.visual", "layers.0.mlp.gate" ('*' matches any
    // run of characters). The checkpoint's tensor dtypes decide each module's format; this list is
    // checked against them (an F8 weight in a listed module is an error).
    std::vector<std::string> modules_to_not_convert;

    // kGptq: the defaults (schemes[0]); per-module overrides (AutoRound extra_config: bits 16 is
    // unquantised), the blocks quantised (block_name_to_quantize; empty: every linear), and the
    // zero-point convention (checkpoint_format "gptq": stored zero − 1; "gptq_v2": the zero).
    // kCompressedTensors: config_groups (in file order) and `ignore` (exact names or "re:").
    // kModelOpt: schemes[0] is quant_algo's; MIXED_PRECISION has one override per module from
    // quantized_layers; `ignore` holds exclude_modules globs ('*' any run, matched on the whole name).
    std::vector<QuantScheme> schemes;
    std::map<std::string, ModuleQuant> overrides;
    std::vector<std::string> quantized_blocks;
    std::vector<std::string> ignore;
    int zero_offset = 0;

    bool quantized() const { return method != QuantMethod::kNone; }
    // What `module` (a linear module name as in the checkpoint, without ".weight") is stored as.
    ModuleQuant module_quant(std::string_view module) const;
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
// modules_to_not_convert), as Qwen's FP8 releases write it. Requires kFP8Block.
nlohmann::json quantization_config_to_json(const QuantizationConfig& q);

}  // namespace qs

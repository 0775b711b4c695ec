// Parsers of the quantization_config objects of GPTQ/AutoRound, compressed-tensors and ModelOpt
// checkpoints (see quantization_config.h), internal to config/. `where` names the object in
// messages ("config.json: quantization_config").
#pragma once

#include <string>

#include <nlohmann/json_fwd.hpp>

#include "config/quantization_config.h"
#include "core/status.h"

namespace qs::quant_parse {

// quant_method "gptq" or "auto-round".
Result<QuantizationConfig> gptq(const nlohmann::json& j, const std::string& where, const std::string& method);
// quant_method "compressed-tensors".
Result<QuantizationConfig> compressed_tensors(const nlohmann::json& j, const std::string& where);
// quant_method "modelopt".
Result<QuantizationConfig> modelopt(const nlohmann::json& j, const std::string& where);

// The compressed-tensors target/ignore match: "re:REGEX" matches when the regex matches at the
// start of the name (Python re.match), anything else when equal to the name.
bool ct_name_match(const std::string& target, std::string_view module);
// Glob match of the whole name, '*' any run of characters (ModelOpt exclude_modules).
bool glob_match_whole(std::string_view pattern, std::string_view s);

}  // namespace qs::quant_parse

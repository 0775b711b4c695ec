// quantization_config parsing, validation and writing (see quantization_config.h). Runs on the
// loading thread; the result is immutable afterwards.
#include "config/quantization_config.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <nlohmann/json.hpp>

#include "config/quant_method_parse.h"
#include "core/check.h"

namespace qs {

namespace {

using json = nlohmann::json;

bool entry_covers(std::string_view entry, std::string_view module) {
    if (entry.empty()) return false;
    if (entry.find('*') == std::string_view::npos) {
        for (size_t pos = module.find(entry); pos != std::string_view::npos; pos = module.find(entry, pos + 1)) {
            const size_t end = pos + entry.size();
            if ((pos == 0 || module[pos - 1] == '.') && (end == module.size() || module[end] == '.')) return true;
        }
        return false;
    }
    // With wildcards: try every run of whole components [b, e).
    std::vector<size_t> begins = {0}, ends;
    for (size_t i = 0; i < module.size(); ++i)
        if (module[i] == '.') {
            ends.push_back(i);
            begins.push_back(i + 1);
        }
    ends.push_back(module.size());
    for (size_t b : begins)
        for (size_t e : ends)
            if (e > b && quant_parse::glob_match_whole(entry, module.substr(b, e - b))) return true;
    return false;
}

}  // namespace

bool QuantizationConfig::excludes(std::string_view module) const {
    for (const std::string& e : modules_to_not_convert)
        if (entry_covers(e, module)) return true;
    return false;
}

ModuleQuant QuantizationConfig::module_quant(std::string_view module) const {
    ModuleQuant none;
    switch (method) {
        case QuantMethod::kNone: none.origin = "no quantization_config"; return none;
        case QuantMethod::kFP8Block: {
            if (excludes(module)) {
                none.origin = "quantization_config.modules_to_not_convert";
                return none;
            }
            ModuleQuant m;
            m.kind = ModuleQuant::Kind::kFP8Block;
            m.bits = 8;
            m.origin = "quantization_config.weight_block_size";
            return m;
        }
        case QuantMethod::kGptq: {
            for (const auto& [name, m] : overrides)
                if (name == module) return m;
            for (const auto& [name, m] : overrides)
                if (entry_covers(name, module)) return m;
            if (excludes(module)) {
                none.origin = "quantization_config.modules_to_not_convert";
                return none;
            }
            if (!quantized_blocks.empty()) {
                bool inside = false;
                for (const std::string& b : quantized_blocks)
                    inside = inside || (module.size() > b.size() && module.substr(0, b.size()) == b && module[b.size()] == '.');
                if (!inside) {
                    none.origin = "quantization_config.block_name_to_quantize (not in a listed block)";
                    return none;
                }
            }
            return schemes.at(0).quant;
        }
        case QuantMethod::kCompressedTensors: {
            for (const std::string& t : ignore)
                if (quant_parse::ct_name_match(t, module)) {
                    none.origin = fmt::format("quantization_config.ignore (\"{}\")", t);
                    return none;
                }
            for (const QuantScheme& s : schemes)
                for (const std::string& t : s.targets)
                    if (t == "Linear" || quant_parse::ct_name_match(t, module)) return s.quant;
            none.origin = "quantization_config.config_groups (no group targets it)";
            return none;
        }
        case QuantMethod::kModelOpt: {
            for (const std::string& g : ignore)
                if (quant_parse::glob_match_whole(g, module)) {
                    none.origin = fmt::format("quantization_config.exclude_modules (\"{}\")", g);
                    return none;
                }
            if (auto it = overrides.find(std::string(module)); it != overrides.end()) return it->second;
            for (const auto& [name, m] : overrides)
                if (entry_covers(name, module)) return m;
            return schemes.at(0).quant;
        }
    }
    return none;
}

QuantizationConfig fp8_block_quantization(std::vector<std::string> modules_to_not_convert) {
    QuantizationConfig q;
    q.method = QuantMethod::kFP8Block;
    q.modules_to_not_convert = std::move(modules_to_not_convert);
    return q;
}

Result<QuantizationConfig> parse_quantization_config(const json& j, const std::string& where) {
    if (!j.is_object()) return corrupt_data(fmt::format("{} must be an object", where));
    auto string_field = [&](const char* key, std::string* out) -> Result<bool> {
        auto it = j.find(key);
        if (it == j.end() || it->is_null()) return false;
        if (!it->is_string()) return corrupt_data(fmt::format("{}.{} must be a string", where, key));
        *out = it->get<std::string>();
        return true;
    };
    std::string method;
    QS_ASSIGN_OR_RETURN(bool has_method, string_field("quant_method", &method));
    if (!has_method) return corrupt_data(fmt::format("{}: missing field quant_method", where));
    if (method == "gptq" || method == "auto-round" || method == "auto_round")
        return quant_parse::gptq(j, where, method);
    if (method == "compressed-tensors") return quant_parse::compressed_tensors(j, where);
    if (method == "modelopt") return quant_parse::modelopt(j, where);
    if (method != "fp8")
        return unsupported(fmt::format(
            "{}.quant_method \"{}\" is not supported (supported: \"fp8\" with weight_block_size [128, 128], "
            "\"gptq\", \"auto-round\", \"compressed-tensors\", \"modelopt\")",
            where, method));

    std::string fmt_name;
    QS_ASSIGN_OR_RETURN(bool has_fmt, string_field("fmt", &fmt_name));
    if (has_fmt && fmt_name != "e4m3")
        return unsupported(fmt::format("{}.fmt \"{}\" is not supported (only \"e4m3\")", where, fmt_name));
    std::string scheme;
    QS_ASSIGN_OR_RETURN(bool has_scheme, string_field("activation_scheme", &scheme));
    if (has_scheme && scheme != "dynamic")
        return unsupported(fmt::format(
            "{}.activation_scheme \"{}\" is not supported (only \"dynamic\": no static activation scales)", where,
            scheme));
    std::string scale_fmt;
    QS_ASSIGN_OR_RETURN(bool has_scale_fmt, string_field("scale_fmt", &scale_fmt));
    if (has_scale_fmt && scale_fmt != "float")
        return unsupported(fmt::format("{}.scale_fmt \"{}\" is not supported (only \"float\")", where, scale_fmt));

    auto bs = j.find("weight_block_size");
    if (bs == j.end() || bs->is_null())
        return unsupported(fmt::format(
            "{}: no weight_block_size; per-tensor FP8 is not supported (only 128x128 block scales)", where));
    std::vector<int64_t> block;
    bool ints = bs->is_array();
    if (ints)
        for (const json& v : *bs) {
            if (!v.is_number_integer()) ints = false;
            else block.push_back(v.get<int64_t>());
        }
    if (!ints) return corrupt_data(fmt::format("{}.weight_block_size must be a list of integers", where));
    if (block != std::vector<int64_t>{128, 128})
        return unsupported(fmt::format("{}.weight_block_size must be [128, 128], got [{}]", where,
                                       fmt::join(block, ", ")));

    QuantizationConfig q = fp8_block_quantization();
    for (const char* key : {"modules_to_not_convert", "ignored_layers"}) {  // HF / vLLM spelling
        auto it = j.find(key);
        if (it == j.end() || it->is_null()) continue;
        if (!it->is_array()) return corrupt_data(fmt::format("{}.{} must be a list of strings", where, key));
        for (size_t i = 0; i < it->size(); ++i) {
            if (!(*it)[i].is_string())
                return corrupt_data(fmt::format("{}.{}[{}] must be a string", where, key, i));
            q.modules_to_not_convert.push_back((*it)[i].get<std::string>());
        }
    }
    return q;
}

json quantization_config_to_json(const QuantizationConfig& q) {
    QS_CHECK(q.method == QuantMethod::kFP8Block);
    return json{{"quant_method", "fp8"},
                {"fmt", "e4m3"},
                {"activation_scheme", "dynamic"},
                {"weight_block_size", {128, 128}},
                {"modules_to_not_convert", q.modules_to_not_convert}};
}

}  // namespace qs

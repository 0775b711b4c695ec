// quantization_config parsers for GPTQ/AutoRound, compressed-tensors and ModelOpt (see
// quant_method_parse.h). Every refusal names the field; unknown provenance keys (iters,
// nsamples, autoround_version, ...) are ignored.
#include "config/quant_method_parse.h"

#include <fmt/format.h>

#include <nlohmann/json.hpp>
#include <regex>

#include "core/log.h"

namespace qs::quant_parse {

namespace {

using json = nlohmann::json;
using Kind = ModuleQuant::Kind;

const json* field(const json& j, const char* key) {
    auto it = j.find(key);
    return it == j.end() || it->is_null() ? nullptr : &*it;
}

Result<std::optional<std::string>> opt_string(const json& j, const char* key, const std::string& where) {
    const json* v = field(j, key);
    if (!v) return std::optional<std::string>();
    if (!v->is_string()) return corrupt_data(fmt::format("{}.{} must be a string", where, key));
    return std::optional<std::string>(v->get<std::string>());
}

Result<std::optional<int64_t>> opt_int(const json& j, const char* key, const std::string& where) {
    const json* v = field(j, key);
    if (!v) return std::optional<int64_t>();
    if (!v->is_number_integer()) return corrupt_data(fmt::format("{}.{} must be an integer", where, key));
    return std::optional<int64_t>(v->get<int64_t>());
}

Result<std::optional<bool>> opt_bool(const json& j, const char* key, const std::string& where) {
    const json* v = field(j, key);
    if (!v) return std::optional<bool>();
    if (!v->is_boolean()) return corrupt_data(fmt::format("{}.{} must be true or false", where, key));
    return std::optional<bool>(v->get<bool>());
}

Result<std::vector<std::string>> string_list(const json& j, const char* key, const std::string& where) {
    std::vector<std::string> out;
    const json* v = field(j, key);
    if (!v) return out;
    if (!v->is_array()) return corrupt_data(fmt::format("{}.{} must be a list of strings", where, key));
    for (size_t i = 0; i < v->size(); ++i) {
        if (!(*v)[i].is_string()) return corrupt_data(fmt::format("{}.{}[{}] must be a string", where, key, i));
        out.push_back((*v)[i].get<std::string>());
    }
    return out;
}

Status check_bits(int64_t bits, const std::string& where) {
    if (bits != 4 && bits != 8)
        return unsupported(fmt::format("{} is {}; only 4- and 8-bit integer weights are supported", where, bits));
    return Status::ok();
}

Status check_group(int64_t g, const std::string& where) {
    if (g != -1 && g <= 0) return corrupt_data(fmt::format("{} is {}; expected a positive size or -1", where, g));
    return Status::ok();
}

// Fields of a GPTQ/AutoRound scheme object (top level or an extra_config entry) over `base`.
Result<ModuleQuant> gptq_scheme(const json& j, const std::string& where, ModuleQuant base) {
    QS_ASSIGN_OR_RETURN(auto bits, opt_int(j, "bits", where));
    QS_ASSIGN_OR_RETURN(auto group, opt_int(j, "group_size", where));
    QS_ASSIGN_OR_RETURN(auto sym, opt_bool(j, "sym", where));
    QS_ASSIGN_OR_RETURN(auto data_type, opt_string(j, "data_type", where));
    QS_ASSIGN_OR_RETURN(auto act_bits, opt_int(j, "act_bits", where));
    if (bits) base.bits = int(*bits);
    if (group) base.group_size = *group;
    if (sym) base.sym = *sym;
    base.origin = where;
    if (base.bits >= 16) {
        base.kind = Kind::kUnquantized;
        return base;
    }
    base.kind = Kind::kIntGroup;
    QS_RETURN_IF_ERROR(check_bits(base.bits, where + ".bits"));
    QS_RETURN_IF_ERROR(check_group(base.group_size, where + ".group_size"));
    if (data_type && *data_type != "int")
        return unsupported(fmt::format("{}.data_type \"{}\" is not supported (only \"int\")", where, *data_type));
    if (act_bits && *act_bits < 16)
        return unsupported(fmt::format("{}.act_bits {} is not supported (weight-only: 16)", where, *act_bits));
    return base;
}

// A compressed-tensors `weights` object → the module format.
Result<ModuleQuant> ct_weights(const json& w, const std::string& where, const std::string& format) {
    ModuleQuant m;
    m.origin = where;
    if (!w.is_object()) return corrupt_data(fmt::format("{} must be an object", where));
    QS_ASSIGN_OR_RETURN(auto bits, opt_int(w, "num_bits", where));
    QS_ASSIGN_OR_RETURN(auto type, opt_string(w, "type", where));
    QS_ASSIGN_OR_RETURN(auto sym, opt_bool(w, "symmetric", where));
    QS_ASSIGN_OR_RETURN(auto strategy, opt_string(w, "strategy", where));
    QS_ASSIGN_OR_RETURN(auto group, opt_int(w, "group_size", where));
    if (!bits) return corrupt_data(fmt::format("{}: missing field num_bits", where));
    m.bits = int(*bits);
    m.sym = sym.value_or(true);
    const std::string t = type.value_or("int"), s = strategy.value_or("");
    if (const json* dyn = field(w, "dynamic"); dyn && !(dyn->is_boolean() && !dyn->get<bool>()))
        return unsupported(fmt::format("{}.dynamic must be false for weights", where));
    if (const json* ao = field(w, "actorder"); ao) {
        if (!ao->is_string()) return corrupt_data(fmt::format("{}.actorder must be a string or null", where));
        const std::string a = ao->get<std::string>();
        if (a != "group" && a != "weight" && a != "static")
            return unsupported(fmt::format("{}.actorder \"{}\" is not supported (group, weight, static)", where, a));
        m.act_order = a == "group";
    }
    if (t == "int") {
        if (format != "pack-quantized")
            return unsupported(fmt::format("{}: integer weights need format \"pack-quantized\", got \"{}\"", where, format));
        QS_RETURN_IF_ERROR(check_bits(m.bits, where + ".num_bits"));
        m.kind = Kind::kIntGroup;
        if (s == "group") {
            if (!group || *group <= 0)
                return corrupt_data(fmt::format("{}.group_size must be a positive integer for strategy \"group\"", where));
            m.group_size = *group;
        } else if (s == "channel") {
            m.group_size = -1;
        } else {
            return unsupported(fmt::format("{}.strategy \"{}\" is not supported for integer weights (group, channel)",
                                           where, s));
        }
        return m;
    }
    if (t == "float") {
        if (format != "nvfp4-pack-quantized")
            return unsupported(fmt::format("{}: float weights are supported only as format \"nvfp4-pack-quantized\", "
                                           "got \"{}\"", where, format));
        if (m.bits != 4) return unsupported(fmt::format("{}.num_bits {} is not supported for NVFP4 (4)", where, m.bits));
        if (s != "tensor_group" || group.value_or(0) != 16)
            return unsupported(fmt::format("{}: NVFP4 needs strategy \"tensor_group\" and group_size 16", where));
        if (!m.sym) return unsupported(fmt::format("{}.symmetric must be true for NVFP4", where));
        m.kind = Kind::kNvfp4;
        m.group_size = 16;
        return m;
    }
    return unsupported(fmt::format("{}.type \"{}\" is not supported (int, float)", where, t));
}

Result<Kind> modelopt_algo(const std::string& algo, const std::string& where) {
    if (algo == "NVFP4" || algo == "W4A16_NVFP4" || algo == "NVFP4_AWQ") return Kind::kNvfp4;
    if (algo == "FP8") return Kind::kFP8Tensor;
    return unsupported(fmt::format("{} \"{}\" is not supported (NVFP4, W4A16_NVFP4, FP8, MIXED_PRECISION)", where, algo));
}

}  // namespace

bool glob_match_whole(std::string_view p, std::string_view s) {
    size_t pi = 0, si = 0, star = std::string_view::npos, mark = 0;
    while (si < s.size()) {
        if (pi < p.size() && p[pi] == '*') {
            star = pi++;
            mark = si;
        } else if (pi < p.size() && p[pi] == s[si]) {
            ++pi;
            ++si;
        } else if (star != std::string_view::npos) {
            pi = star + 1;
            si = ++mark;
        } else {
            return false;
        }
    }
    while (pi < p.size() && p[pi] == '*') ++pi;
    return pi == p.size();
}

bool ct_name_match(const std::string& target, std::string_view module) {
    if (target.rfind("re:", 0) == 0) {
        try {
            const std::regex re(target.substr(3), std::regex::ECMAScript);
            const std::string m(module);
            return std::regex_search(m, re, std::regex_constants::match_continuous);
        } catch (const std::regex_error&) {
            return false;  // validated at parse time
        }
    }
    return target == module;
}

Result<QuantizationConfig> gptq(const json& j, const std::string& where, const std::string& method) {
    QuantizationConfig q;
    q.method = QuantMethod::kGptq;
    ModuleQuant d;
    d.group_size = 128;
    QS_ASSIGN_OR_RETURN(auto bits, opt_int(j, "bits", where));
    if (!bits) return corrupt_data(fmt::format("{}: missing field bits", where));
    QS_ASSIGN_OR_RETURN(d, gptq_scheme(j, where, d));
    if (d.kind != Kind::kIntGroup) return unsupported(fmt::format("{}.bits {} quantises nothing", where, *bits));
    QS_ASSIGN_OR_RETURN(auto desc_act, opt_bool(j, "desc_act", where));
    d.act_order = desc_act.value_or(false);
    QS_ASSIGN_OR_RETURN(auto ckpt_format, opt_string(j, "checkpoint_format", where));
    QS_ASSIGN_OR_RETURN(auto packing, opt_string(j, "packing_format", where));
    // GPTQ v1 ("gptq", and AutoRound's packers) store zero − 1; gptq_v2 stores the zero.
    q.zero_offset = 1;
    if (ckpt_format) {
        if (*ckpt_format == "gptq_v2") q.zero_offset = 0;
        else if (*ckpt_format != "gptq")
            return unsupported(fmt::format("{}.checkpoint_format \"{}\" is not supported (gptq, gptq_v2)", where,
                                           *ckpt_format));
    }
    if (packing) {
        const std::string& p = *packing;
        const bool ok = p == "auto_round" || p == "auto_round:auto_gptq" || p == "auto_round:gptq" ||
                        p == "auto_gptq" || p == "gptq";
        if (!ok)
            return unsupported(fmt::format("{}.packing_format \"{}\" is not supported (auto_round, "
                                           "auto_round:auto_gptq, auto_gptq; AWQ packing is not)", where, p));
    }
    if (const json* dyn = field(j, "dynamic"); dyn && !(dyn->is_object() && dyn->empty()))
        return unsupported(fmt::format("{}.dynamic (per-module GPTQModel rules) is not supported", where));
    if (const json* m = field(j, "modules_in_block_to_quantize"); m)
        return unsupported(fmt::format("{}.modules_in_block_to_quantize is not supported", where));
    q.schemes.push_back({method, {"Linear"}, d});
    for (const char* key : {"block_name_to_quantize", "to_quant_block_names"}) {
        const json* b = field(j, key);
        if (!b) continue;
        auto add = [&](const json& v, const std::string& w) -> Status {
            if (!v.is_string()) return corrupt_data(w + " must be a string or a list of strings");
            const std::string s = v.get<std::string>();
            for (size_t pos = 0; pos <= s.size();) {
                const size_t comma = std::min(s.find(',', pos), s.size());
                if (comma > pos) q.quantized_blocks.push_back(s.substr(pos, comma - pos));
                pos = comma + 1;
            }
            return Status::ok();
        };
        if (b->is_array()) {
            for (size_t i = 0; i < b->size(); ++i) {
                const json& v = (*b)[i];
                if (v.is_array()) {
                    for (size_t k = 0; k < v.size(); ++k) QS_RETURN_IF_ERROR(add(v[k], fmt::format("{}.{}[{}][{}]", where, key, i, k)));
                } else {
                    QS_RETURN_IF_ERROR(add(v, fmt::format("{}.{}[{}]", where, key, i)));
                }
            }
        } else {
            QS_RETURN_IF_ERROR(add(*b, fmt::format("{}.{}", where, key)));
        }
    }
    QS_ASSIGN_OR_RETURN(q.modules_to_not_convert, string_list(j, "modules_to_not_convert", where));
    if (const json* extra = field(j, "extra_config"); extra) {
        if (!extra->is_object()) return corrupt_data(fmt::format("{}.extra_config must be an object", where));
        for (auto it = extra->begin(); it != extra->end(); ++it) {
            const std::string w = fmt::format("{}.extra_config[\"{}\"]", where, it.key());
            if (!it.value().is_object()) return corrupt_data(w + " must be an object");
            ModuleQuant base = d;
            QS_ASSIGN_OR_RETURN(ModuleQuant m, gptq_scheme(it.value(), w, base));
            q.overrides[it.key()] = m;
        }
    }
    return q;
}

Result<QuantizationConfig> compressed_tensors(const json& j, const std::string& where) {
    QuantizationConfig q;
    q.method = QuantMethod::kCompressedTensors;
    QS_ASSIGN_OR_RETURN(auto format, opt_string(j, "format", where));
    QS_ASSIGN_OR_RETURN(auto status, opt_string(j, "quantization_status", where));
    if (status && *status != "compressed")
        return unsupported(fmt::format("{}.quantization_status \"{}\" is not supported (only \"compressed\")", where,
                                       *status));
    if (field(j, "kv_cache_scheme"))
        return unsupported(fmt::format("{}.kv_cache_scheme is not supported (use --kv-cache-dtype)", where));
    if (const json* sc = field(j, "sparsity_config"); sc && !(sc->is_object() && sc->empty()))
        return unsupported(fmt::format("{}.sparsity_config is not supported", where));
    if (const json* tc = field(j, "transform_config"); tc && !(tc->is_object() && tc->empty()))
        return unsupported(fmt::format("{}.transform_config is not supported", where));
    const json* groups = field(j, "config_groups");
    if (!groups || !groups->is_object() || groups->empty())
        return corrupt_data(fmt::format("{}.config_groups must be a non-empty object", where));
    for (auto it = groups->begin(); it != groups->end(); ++it) {
        const std::string w = fmt::format("{}.config_groups.{}", where, it.key());
        const json& g = it.value();
        if (!g.is_object()) return corrupt_data(w + " must be an object");
        QS_ASSIGN_OR_RETURN(auto gformat, opt_string(g, "format", w));
        const std::string fmt_name = gformat ? *gformat : format.value_or("");
        if (fmt_name.empty()) return corrupt_data(fmt::format("{}: no format (in the group or {}.format)", w, where));
        QuantScheme s;
        s.name = it.key();
        QS_ASSIGN_OR_RETURN(s.targets, string_list(g, "targets", w));
        if (s.targets.empty()) return corrupt_data(w + ".targets must be a non-empty list");
        for (const std::string& t : s.targets)
            if (t.rfind("re:", 0) == 0) {
                try {
                    std::regex re(t.substr(3), std::regex::ECMAScript);
                } catch (const std::regex_error&) {
                    return corrupt_data(fmt::format("{}.targets: bad regular expression \"{}\"", w, t));
                }
            }
        const json* weights = field(g, "weights");
        if (!weights) return unsupported(w + ".weights is null: activation-only quantisation is not supported");
        QS_ASSIGN_OR_RETURN(s.quant, ct_weights(*weights, w + ".weights", fmt_name));
        if (field(g, "output_activations")) return unsupported(w + ".output_activations is not supported");
        if (const json* ia = field(g, "input_activations"); ia) {
            if (s.quant.kind != Kind::kNvfp4)
                return unsupported(w + ".input_activations is not supported for integer weights (only W4A16/W8A16)");
            log_warn("{}.input_activations (NVFP4 W4A4) are not applied: qwenserve runs these weights with 16/32-bit "
                     "activations (weight-only)", w);
        }
        q.schemes.push_back(std::move(s));
    }
    QS_ASSIGN_OR_RETURN(q.ignore, string_list(j, "ignore", where));
    for (const std::string& t : q.ignore)
        if (t.rfind("re:", 0) == 0) {
            try {
                std::regex re(t.substr(3), std::regex::ECMAScript);
            } catch (const std::regex_error&) {
                return corrupt_data(fmt::format("{}.ignore: bad regular expression \"{}\"", where, t));
            }
        }
    return q;
}

Result<QuantizationConfig> modelopt(const json& top, const std::string& where_top) {
    // config.json's object, or hf_quant_config.json's {"producer", "quantization": {...}}.
    const json* inner = field(top, "quantization");
    const json& j = inner && inner->is_object() ? *inner : top;
    const std::string where = inner && inner->is_object() ? where_top + ".quantization" : where_top;
    QuantizationConfig q;
    q.method = QuantMethod::kModelOpt;
    QS_ASSIGN_OR_RETURN(auto algo, opt_string(j, "quant_algo", where));
    if (!algo) return corrupt_data(fmt::format("{}: missing field quant_algo", where));
    QS_ASSIGN_OR_RETURN(auto group, opt_int(j, "group_size", where));
    QS_ASSIGN_OR_RETURN(auto kv, opt_string(j, "kv_cache_quant_algo", where));
    if (kv && *kv != "FP8")
        return unsupported(fmt::format("{}.kv_cache_quant_algo \"{}\" is not supported (null or FP8)", where, *kv));
    if (kv) log_warn("{}.kv_cache_quant_algo FP8: the checkpoint's k/v scales are not used (--kv-cache-dtype decides)", where);
    if (group && *group != 16)
        return unsupported(fmt::format("{}.group_size {} is not supported (NVFP4 uses 16)", where, *group));
    for (const char* key : {"exclude_modules", "ignore"}) {
        QS_ASSIGN_OR_RETURN(std::vector<std::string> l, string_list(j, key, where));
        q.ignore.insert(q.ignore.end(), l.begin(), l.end());
    }
    if (*algo == "MIXED_PRECISION") {
        const json* layers = field(j, "quantized_layers");
        if (!layers || !layers->is_object())
            return corrupt_data(fmt::format("{}: quant_algo MIXED_PRECISION needs a quantized_layers object", where));
        for (auto it = layers->begin(); it != layers->end(); ++it) {
            const std::string w = fmt::format("{}.quantized_layers[\"{}\"]", where, it.key());
            if (!it.value().is_object()) return corrupt_data(w + " must be an object");
            QS_ASSIGN_OR_RETURN(auto a, opt_string(it.value(), "quant_algo", w));
            if (!a) return corrupt_data(w + ": missing field quant_algo");
            QS_ASSIGN_OR_RETURN(auto g, opt_int(it.value(), "group_size", w));
            if (g && *g != 16) return unsupported(fmt::format("{}.group_size {} is not supported (16)", w, *g));
            ModuleQuant m;
            QS_ASSIGN_OR_RETURN(m.kind, modelopt_algo(*a, w + ".quant_algo"));
            m.bits = m.kind == Kind::kNvfp4 ? 4 : 8;
            m.group_size = m.kind == Kind::kNvfp4 ? 16 : 0;
            m.origin = w;
            q.overrides[it.key()] = m;
        }
        ModuleQuant none;
        none.origin = where + ".quantized_layers (not listed)";
        q.schemes.push_back({"MIXED_PRECISION", {}, none});
        return q;
    }
    ModuleQuant m;
    QS_ASSIGN_OR_RETURN(m.kind, modelopt_algo(*algo, where + ".quant_algo"));
    m.bits = m.kind == Kind::kNvfp4 ? 4 : 8;
    m.group_size = m.kind == Kind::kNvfp4 ? 16 : 0;
    m.origin = where + ".quant_algo";
    q.schemes.push_back({*algo, {"Linear"}, m});
    return q;
}

}  // namespace qs::quant_parse

// Tool schemas and XML parameter typing (see tool_schema.h).
#include "tokenizer/tool_schema.h"

#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>

namespace qs::tok {

namespace {
using Json = nlohmann::ordered_json;

std::string lower(std::string s) {
    for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return s;
}

std::string declared_type(const Json& schema) {
    if (!schema.is_object() || !schema.contains("type")) return "";
    const Json& t = schema["type"];
    if (t.is_string()) return lower(t.get<std::string>());
    if (t.is_array())  // e.g. ["integer", "null"]: the first non-null type
        for (const Json& x : t)
            if (x.is_string() && x != "null") return lower(x.get<std::string>());
    return "";
}
}  // namespace

Result<ToolSchemas> ToolSchemas::from_json(const Json& tools) {
    ToolSchemas schemas;
    if (tools.is_null()) return schemas;
    if (!tools.is_array()) return invalid_argument("tools must be an array");
    for (size_t i = 0; i < tools.size(); ++i) {
        const Json& tool = tools[i];
        const std::string where = "tools[" + std::to_string(i) + "]";
        const Json* fn = tool.is_object() && tool.contains("function") ? &tool["function"] : &tool;
        if (!fn->is_object() || !fn->contains("name") || !(*fn)["name"].is_string())
            return invalid_argument(where + " has no function name");
        auto& params = schemas.types_[(*fn)["name"].get<std::string>()];
        if (!fn->contains("parameters") || (*fn)["parameters"].is_null()) continue;
        const Json& p = (*fn)["parameters"];
        if (!p.is_object()) return invalid_argument(where + ".function.parameters is not an object");
        if (!p.contains("properties")) continue;
        if (!p["properties"].is_object())
            return invalid_argument(where + ".function.parameters.properties is not an object");
        for (const auto& [name, schema] : p["properties"].items()) {
            params[name] = declared_type(schema);
            Json values = Json::array();
            if (schema.is_object() && schema.contains("enum") && schema["enum"].is_array()) values = schema["enum"];
            if (schema.is_object() && schema.contains("const")) values.push_back(schema["const"]);
            if (!values.empty()) schemas.enums_[(*fn)["name"].get<std::string>()][name] = std::move(values);
            if (params[name] == "string" && (schema.contains("minLength") || schema.contains("maxLength") ||
                                             schema.contains("pattern") || schema.contains("format")))
                schemas.bounded_strings_[(*fn)["name"].get<std::string>()][name] = true;
        }
    }
    return schemas;
}

Result<ToolSchemas> ToolSchemas::from_text(std::string_view text) {
    Json tools = Json::parse(text, nullptr, false);
    if (tools.is_discarded()) return invalid_argument("the tool schema is not valid JSON");
    return from_json(tools);
}

Json ToolSchemas::convert(const std::string& function, const std::string& parameter,
                          const std::string& raw_text) const {
    if (lower(raw_text) == "null") return nullptr;
    auto fn = types_.find(function);
    if (fn == types_.end()) return raw_text;
    auto param = fn->second.find(parameter);
    if (param == fn->second.end()) return raw_text;
    const std::string& type = param->second;
    if (auto f = enums_.find(function); f != enums_.end())
        if (auto e = f->second.find(parameter); e != f->second.end()) {
            const size_t b = raw_text.find_first_not_of(" \t\r\n");
            const std::string t = b == std::string::npos ? std::string()
                                                         : raw_text.substr(b, raw_text.find_last_not_of(" \t\r\n") - b + 1);
            const Json as_json = Json::parse(t, nullptr, false);
            for (const Json& v : e->second)
                if ((v.is_string() && v.get<std::string>() == t) || (!as_json.is_discarded() && v == as_json)) return v;
        }
    if (type == "string" || type == "str" || type == "text" || type == "varchar" || type == "char" ||
        type == "enum") {
        if (auto f = bounded_strings_.find(function); f != bounded_strings_.end() && f->second.count(parameter)) {
            const size_t b = raw_text.find_first_not_of(" \t\r\n");
            return b == std::string::npos ? std::string()
                                          : raw_text.substr(b, raw_text.find_last_not_of(" \t\r\n") - b + 1);
        }
        return raw_text;
    }
    // Typed values ignore surrounding whitespace, as Python's int() / float() / json.loads do
    // in vLLM's parser (a constrained decoder may put newlines around a value).
    const size_t b = raw_text.find_first_not_of(" \t\r\n");
    const std::string raw = b == std::string::npos ? std::string()
                                                   : raw_text.substr(b, raw_text.find_last_not_of(" \t\r\n") - b + 1);
    if (type.rfind("int", 0) == 0 || type.rfind("uint", 0) == 0 || type == "long" || type == "short") {
        errno = 0;
        char* end = nullptr;
        const long long v = std::strtoll(raw.c_str(), &end, 10);
        if (!raw.empty() && *end == '\0' && errno == 0) return v;
        // Beyond 64 bits: still a JSON integer (json.loads would read it as one).
        Json big = Json::parse(raw, nullptr, false);
        if (!big.is_discarded() && big.is_number()) return big;
        return raw_text;
    }
    if (type.rfind("num", 0) == 0 || type.rfind("float", 0) == 0 || type == "double") {
        errno = 0;
        char* end = nullptr;
        const bool is_float = raw.find_first_of(".eE") != std::string::npos;
        if (!is_float) {
            const long long v = std::strtoll(raw.c_str(), &end, 10);
            if (!raw.empty() && *end == '\0' && errno == 0) return v;
        }
        const double d = std::strtod(raw.c_str(), &end);
        // strtod also reads "nan" and "inf", which JSON cannot hold: those stay text.
        if (!raw.empty() && *end == '\0' && errno == 0 && std::isfinite(d)) return d;
        return raw_text;
    }
    if (type == "boolean" || type == "bool" || type == "binary") {
        const std::string l = lower(raw);
        if (l == "true") return true;
        if (l == "false") return false;
        return raw_text;
    }
    // object, array and anything else: JSON if it parses.
    Json parsed = Json::parse(raw, nullptr, false);
    if (!parsed.is_discarded()) return parsed;
    return raw_text;
}

}  // namespace qs::tok

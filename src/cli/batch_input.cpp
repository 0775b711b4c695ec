// Parsing of the batch generation input (see batch_input.h).
#include "cli/batch_input.h"

#include <fmt/format.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <unordered_set>

namespace qs::cli {

namespace {

using nlohmann::json;

Status field_error(int64_t line, const std::string& field, const std::string& why) {
    return invalid_argument(fmt::format("line {}: \"{}\": {}", line, field, why));
}

Result<int64_t> get_int(const json& v, int64_t line, const std::string& field) {
    if (!v.is_number_integer()) return field_error(line, field, "must be an integer");
    return v.get<int64_t>();
}

Result<double> get_number(const json& v, int64_t line, const std::string& field) {
    if (!v.is_number()) return field_error(line, field, "must be a number");
    return v.get<double>();
}

Result<std::vector<int32_t>> get_ids(const json& v, int64_t line, const std::string& field) {
    if (!v.is_array()) return field_error(line, field, "must be an array of integers");
    std::vector<int32_t> ids;
    for (size_t i = 0; i < v.size(); ++i) {
        if (!v[i].is_number_integer() || v[i].get<int64_t>() < 0 || v[i].get<int64_t>() > INT32_MAX)
            return field_error(line, fmt::format("{}[{}]", field, i), "must be a non-negative integer token id");
        ids.push_back(int32_t(v[i].get<int64_t>()));
    }
    return ids;
}

}  // namespace

Result<BatchItem> parse_batch_line(const std::string& text, int64_t line, const SamplingParams& defaults) {
    json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded()) return invalid_argument(fmt::format("line {}: not valid JSON", line));
    if (!j.is_object()) return invalid_argument(fmt::format("line {}: must be a JSON object", line));
    BatchItem item;
    item.line = line;
    item.id = fmt::format("line-{}", line);
    item.params = defaults;
    SamplingParams& p = item.params;
    for (const auto& [key, v] : j.items()) {
        if (key == "id") {
            if (!v.is_string() || v.get<std::string>().empty()) return field_error(line, key, "must be a non-empty string");
            item.id = v.get<std::string>();
        } else if (key == "prompt_ids") {
            QS_ASSIGN_OR_RETURN(auto ids, get_ids(v, line, key));
            if (ids.empty()) return field_error(line, key, "must not be empty");
            item.prompt_ids = std::move(ids);
        } else if (key == "prompt") {
            if (!v.is_string() || v.get<std::string>().empty()) return field_error(line, key, "must be a non-empty string");
            item.prompt = v.get<std::string>();
        } else if (key == "max_tokens") {
            QS_ASSIGN_OR_RETURN(p.max_tokens, get_int(v, line, key));
        } else if (key == "temperature") {
            QS_ASSIGN_OR_RETURN(p.temperature, get_number(v, line, key));
        } else if (key == "top_p") {
            QS_ASSIGN_OR_RETURN(p.top_p, get_number(v, line, key));
        } else if (key == "top_k") {
            QS_ASSIGN_OR_RETURN(p.top_k, get_int(v, line, key));
            if (p.top_k == -1) p.top_k = 0;  // vLLM's "off"
        } else if (key == "min_p") {
            QS_ASSIGN_OR_RETURN(p.min_p, get_number(v, line, key));
        } else if (key == "seed") {
            QS_ASSIGN_OR_RETURN(int64_t seed, get_int(v, line, key));
            p.seed = uint64_t(seed);
        } else if (key == "stop") {
            p.stop.clear();
            if (v.is_string()) {
                p.stop.push_back(v.get<std::string>());
            } else if (v.is_array()) {
                for (const auto& s : v) {
                    if (!s.is_string()) return field_error(line, key, "must be a string or an array of strings");
                    p.stop.push_back(s.get<std::string>());
                }
            } else if (!v.is_null()) {
                return field_error(line, key, "must be a string or an array of strings");
            }
        } else if (key == "stop_token_ids") {
            QS_ASSIGN_OR_RETURN(p.stop_token_ids, get_ids(v, line, key));
        } else if (key == "ignore_eos") {
            if (!v.is_boolean()) return field_error(line, key, "must be true or false");
            p.ignore_eos = v.get<bool>();
        } else if (key == "n") {
            QS_ASSIGN_OR_RETURN(p.n, get_int(v, line, key));
        } else if (key == "logprobs") {
            QS_ASSIGN_OR_RETURN(p.logprobs, get_int(v, line, key));
        } else if (key == "presence_penalty") {
            QS_ASSIGN_OR_RETURN(p.presence_penalty, get_number(v, line, key));
        } else if (key == "frequency_penalty") {
            QS_ASSIGN_OR_RETURN(p.frequency_penalty, get_number(v, line, key));
        } else if (key == "repetition_penalty") {
            QS_ASSIGN_OR_RETURN(p.repetition_penalty, get_number(v, line, key));
        } else {
            return field_error(line, key, "unknown field");
        }
    }
    if (item.prompt_ids.has_value() == item.prompt.has_value())
        return invalid_argument(fmt::format("line {}: needs exactly one of \"prompt_ids\" and \"prompt\"", line));
    if (Status st = p.validate(); !st.is_ok()) {
        // validate() starts its message with the parameter's name.
        const std::string& m = st.message();
        const size_t sp = m.find(' ');
        return field_error(line, m.substr(0, sp), m.substr(sp + 1));
    }
    return item;
}

Result<std::vector<BatchItem>> read_batch_file(const std::string& path, const SamplingParams& defaults) {
    std::ifstream in(path);
    if (!in) return not_found("cannot open --input file '" + path + "'");
    std::vector<BatchItem> items;
    std::unordered_set<std::string> ids;
    std::string text;
    for (int64_t line = 1; std::getline(in, text); ++line) {
        if (text.find_first_not_of(" \t\r") == std::string::npos) continue;
        QS_ASSIGN_OR_RETURN(BatchItem item, parse_batch_line(text, line, defaults));
        if (!ids.insert(item.id).second)
            return field_error(line, "id", fmt::format("duplicate id '{}'", item.id));
        items.push_back(std::move(item));
    }
    if (in.bad()) return io_error("reading --input file '" + path + "' failed");
    if (items.empty()) return invalid_argument("--input file '" + path + "' has no requests");
    return items;
}

}  // namespace qs::cli

// Command-line parsing (see args.h).
#include "core/args.h"

#include <cctype>
#include <cerrno>
#include <cstdlib>

#include "core/env_var.h"

namespace qs {

std::string env_var_name(std::string_view option) {
    std::string s = "QS_";
    for (char c : option) s += c == '-' ? '_' : char(std::toupper(static_cast<unsigned char>(c)));
    return s;
}

Result<Args> Args::parse(int argc, char** argv, const std::set<std::string>& flags,
                         const std::set<std::string>& valued) {
    Args a;
    for (int i = 0; i < argc; ++i) {
        std::string tok = argv[i];
        if (tok.rfind("--", 0) != 0) {
            a.positional_.push_back(tok);
            continue;
        }
        std::string name = tok.substr(2);
        std::optional<std::string> inline_value;
        if (auto eq = name.find('='); eq != std::string::npos) {
            inline_value = name.substr(eq + 1);
            name = name.substr(0, eq);
        }
        if (flags.count(name)) {
            if (inline_value) return invalid_argument("option --" + name + " takes no value");
            a.values_[name] = "1";
        } else if (valued.count(name)) {
            if (inline_value) {
                a.values_[name] = *inline_value;
            } else {
                if (i + 1 >= argc) return invalid_argument("option --" + name + " needs a value");
                a.values_[name] = argv[++i];
            }
        } else {
            return invalid_argument("unknown option --" + name);
        }
    }
    // Environment fallbacks for options not given on the command line.
    for (const auto* set : {&flags, &valued}) {
        for (const auto& name : *set) {
            if (a.values_.count(name)) continue;
            if (const char* v = std::getenv(env_var_name(name).c_str())) a.values_[name] = v;
        }
    }
    return a;
}

bool Args::has(const std::string& name) const {
    auto it = values_.find(name);
    return it != values_.end() && it->second != "0" && it->second != "false";
}

std::optional<std::string> Args::get(const std::string& name) const {
    auto it = values_.find(name);
    if (it == values_.end()) return std::nullopt;
    return it->second;
}

std::string Args::get_or(const std::string& name, const std::string& fallback) const {
    auto v = get(name);
    return v ? *v : fallback;
}

Result<int64_t> Args::get_int(const std::string& name, int64_t fallback) const {
    auto v = get(name);
    if (!v) return fallback;
    errno = 0;
    char* end = nullptr;
    long long x = std::strtoll(v->c_str(), &end, 10);
    if (v->empty() || *end != '\0' || errno == ERANGE)
        return invalid_argument("--" + name + " must be an integer, got '" + *v + "'");
    return int64_t(x);
}

Result<double> Args::get_double(const std::string& name, double fallback) const {
    auto v = get(name);
    if (!v) return fallback;
    char* end = nullptr;
    double x = std::strtod(v->c_str(), &end);
    if (v->empty() || *end != '\0') return invalid_argument("--" + name + " must be a number, got '" + *v + "'");
    return x;
}

Result<std::string> Args::require(const std::string& name) const {
    auto v = get(name);
    if (!v || v->empty()) return invalid_argument("missing required option --" + name);
    return *v;
}

Result<std::vector<int64_t>> parse_int_list(const std::string& text, const std::string& what) {
    std::vector<int64_t> out;
    size_t pos = 0;
    while (pos <= text.size()) {
        size_t comma = text.find(',', pos);
        std::string item = text.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
        char* end = nullptr;
        errno = 0;
        long long x = std::strtoll(item.c_str(), &end, 10);
        if (item.empty() || *end != '\0' || errno == ERANGE)
            return invalid_argument(what + ": '" + item + "' is not an integer");
        out.push_back(x);
        if (comma == std::string::npos) break;
        pos = comma + 1;
    }
    return out;
}

}  // namespace qs

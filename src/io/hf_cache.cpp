// Hugging Face hub cache lookups (see hf_cache.h).
#include "io/hf_cache.h"

#include <fmt/format.h>

#include <cctype>
#include <cstdlib>
#include <filesystem>
#include <fstream>

namespace qs {

namespace fs = std::filesystem;

namespace {

bool valid_part(std::string_view s) {
    if (s.empty() || s.front() == '.') return false;
    for (char c : s)
        if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.')) return false;
    return true;
}

std::string env(const char* name) {
    const char* v = std::getenv(name);
    return v ? std::string(v) : std::string();
}

std::string trim(std::string s) {
    while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.pop_back();
    while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.erase(s.begin());
    return s;
}

}  // namespace

bool is_hf_model_id(std::string_view model) {
    const size_t slash = model.find('/');
    if (slash == std::string_view::npos || model.find('/', slash + 1) != std::string_view::npos) return false;
    return valid_part(model.substr(0, slash)) && valid_part(model.substr(slash + 1));
}

std::string hf_hub_cache_dir() {
    if (std::string v = env("HF_HUB_CACHE"); !v.empty()) return v;
    if (std::string v = env("HF_HOME"); !v.empty()) return (fs::path(v) / "hub").string();
    if (std::string v = env("HOME"); !v.empty()) return (fs::path(v) / ".cache" / "huggingface" / "hub").string();
    return {};
}

Result<std::string> resolve_hf_snapshot(std::string_view id, const std::string& hub) {
    const size_t slash = id.find('/');
    const std::string org(id.substr(0, slash)), name(id.substr(slash + 1));
    const fs::path repo = fs::path(hub) / fmt::format("models--{}--{}", org, name);
    const fs::path ref = repo / "refs" / "main";
    const std::string fix = fmt::format(
        "download it with `hf download {}` (or set HF_HUB_CACHE / HF_HOME to the cache that has it)", id);
    std::ifstream f(ref);
    if (!f)
        return not_found(fmt::format("--model {}: not a local directory, and not in the Hugging Face cache "
                                     "(no {}); {}",
                                     id, ref.string(), fix));
    std::string rev;
    std::getline(f, rev);
    rev = trim(rev);
    if (rev.empty() || rev.find('/') != std::string::npos || rev.front() == '.')
        return corrupt_data(fmt::format("--model {}: {} does not hold a revision", id, ref.string()));
    const fs::path snapshot = repo / "snapshots" / rev;
    std::error_code ec;
    if (!fs::is_directory(snapshot, ec))
        return not_found(fmt::format("--model {}: {} names revision {}, but {} is missing (an interrupted "
                                     "download?); {}",
                                     id, ref.string(), rev, snapshot.string(), fix));
    return snapshot.string();
}

Result<std::string> resolve_model_path(const std::string& model) {
    std::error_code ec;
    if (!is_hf_model_id(model) || fs::exists(model, ec)) return model;
    const std::string hub = hf_hub_cache_dir();
    if (hub.empty())
        return not_found(fmt::format("--model {}: not a local directory, and there is no Hugging Face cache to look "
                                     "in (HF_HUB_CACHE, HF_HOME and HOME are unset)",
                                     model));
    return resolve_hf_snapshot(model, hub);
}

}  // namespace qs

// Helpers shared by the tokenizer tests: where the Qwen3 tokenizer and the corpus are, and
// loading them once per test binary.
#pragma once

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace qs::tok::testing {

// shared/ sits beside the clone in CI; the environment variable QS_SHARED_DIR overrides.
inline std::string qwen3_dir() {
    const char* shared = std::getenv("QS_SHARED_DIR");
    return (shared ? std::string(shared) : std::string(QS_SOURCE_DIR) + "/../shared") +
           "/data/tokenizers/qwen3";
}
inline std::string data_dir() { return std::string(QS_SOURCE_DIR) + "/tests/data/tokenizer"; }

// The Qwen3 tokenizer, or nullptr when ../shared is not there (tests then skip).
inline const Tokenizer* qwen3() {
    static std::unique_ptr<Tokenizer> t = [] {
        std::unique_ptr<Tokenizer> loaded;
        if (std::filesystem::exists(qwen3_dir() + "/tokenizer.json")) {
            auto r = Tokenizer::from_dir(qwen3_dir());
            if (r.is_ok()) loaded = std::move(r).value();
        }
        return loaded;
    }();
    return t.get();
}

inline std::vector<std::string> corpus() {
    std::vector<std::string> out;
    std::ifstream in(data_dir() + "/corpus.jsonl");
    std::string line;
    while (std::getline(in, line)) out.push_back(nlohmann::json::parse(line).get<std::string>());
    return out;
}

}  // namespace qs::tok::testing

#define QS_REQUIRE_QWEN3()                                               \
    const ::qs::tok::Tokenizer* tok = ::qs::tok::testing::qwen3();       \
    if (tok == nullptr) GTEST_SKIP() << "no ../shared/data/tokenizers/qwen3"

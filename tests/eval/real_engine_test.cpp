// The eval commands against `qwenserve serve` on the REAL engine (CPU backend) with the trained
// test model models/qwen36-tiny: the tokenizer, chat template (thinking on and off), reasoning
// parser and usage are real, so the mechanics are checked end to end. The 20M-parameter model
// writes no working code and finds no needle; what is checked is that every problem and cell is
// requested, answered, counted and classified, and that NIAH prompts are sized to their targets
// in the real tokenizer's tokens.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "../common/run_binary.h"
#include "bench/server_process.h"
#include "eval/sandbox.h"

namespace {

using qs::test::run_binary;

std::string tmp(const std::string& name) {
    return ::testing::TempDir() + "qs_eval_real_" + std::to_string(::getpid()) + "_" + name;
}

std::vector<nlohmann::json> read_lines(const std::string& path) {
    std::ifstream f(path);
    std::vector<nlohmann::json> out;
    std::string line;
    while (std::getline(f, line)) out.push_back(nlohmann::json::parse(line));
    return out;
}

class RealEngine : public ::testing::Test {
   protected:
    static void SetUpTestSuite() {
        const std::string model = std::string(QS_SOURCE_DIR) + "/models/qwen36-tiny";
        if (!std::filesystem::exists(model + "/model.safetensors")) return;
        auto port = qs::bench::pick_free_port();
        ASSERT_TRUE(port.is_ok());
        port_ = *port;
        log_ = tmp("server.log");
        auto p = qs::bench::ServerProcess::spawn(
            {QS_BINARY, "serve", "--model", model, "--served-model-name", "qwen36-tiny", "--port",
             std::to_string(port_), "--max-model-len", "4096"},
            log_);
        ASSERT_TRUE(p.is_ok()) << p.status().message();
        server_ = std::move(*p).release();
        ASSERT_EQ(qs::bench::wait_healthy(*server_, port_, 120), qs::bench::HealthWait::kHealthy)
            << qs::bench::log_tail(log_, 5);
    }
    static void TearDownTestSuite() {
        if (server_) server_->stop(10);
        delete server_;
        server_ = nullptr;
        std::remove(log_.c_str());
    }
    void SetUp() override {
        if (!server_) GTEST_SKIP() << "models/qwen36-tiny is absent";
    }
    std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }

    static inline qs::bench::ServerProcess* server_ = nullptr;
    static inline int port_ = 0;
    static inline std::string log_;
};

TEST_F(RealEngine, CodeEvalClassifiesEveryProblem) {
    if (!std::filesystem::exists("/usr/bin/python3") ||
        !qs::eval::check_sandbox_available().is_ok())
        GTEST_SKIP() << "no python3 or no namespaces";
    for (bool thinking : {false, true}) {
        std::string out = tmp(thinking ? "think.jsonl" : "plain.jsonl");
        auto r = run_binary("eval code --url " + url() + " --model qwen36-tiny --out " + out +
                            " --max-tokens 24 --concurrency 4" + (thinking ? " --thinking" : ""));
        ASSERT_EQ(r.exit_code, 0) << r.output;
        auto lines = read_lines(out);
        ASSERT_EQ(lines.size(), 10u);
        for (const auto& j : lines) {
            EXPECT_FALSE(j["error_class"].get<std::string>().empty()) << j.dump();
            EXPECT_EQ(j["error_class"].get<std::string>().rfind("request_error", 0),
                      std::string::npos)
                << j.dump();
            EXPECT_GT(j["completion_tokens"].get<int64_t>(), 0) << j.dump();
            EXPECT_LE(j["completion_tokens"].get<int64_t>(), 24) << j.dump();
            EXPECT_GT(j["prompt_tokens"].get<int64_t>(), 20) << j.dump();
            EXPECT_LE(j["reasoning_tokens"].get<int64_t>(), j["completion_tokens"].get<int64_t>());
            if (!thinking) {
                EXPECT_EQ(j["reasoning_tokens"].get<int64_t>(), 0) << j.dump();
            }
        }
        std::remove(out.c_str());
    }
}

TEST_F(RealEngine, NiahSizesPromptsInRealTokens) {
    std::string out = tmp("niah.jsonl");
    auto r = run_binary("eval niah --url " + url() + " --model qwen36-tiny --out " + out +
                        " --lengths 300,1500 --depths 0,1 --max-tokens 8 --max-model-len 4096");
    ASSERT_EQ(r.exit_code, 0) << r.output;
    auto lines = read_lines(out);
    ASSERT_EQ(lines.size(), 4u);
    for (const auto& j : lines) {
        EXPECT_TRUE(j["error"].get<std::string>().empty()) << j.dump();
        const double target = j["target_tokens"].get<double>();
        EXPECT_NEAR(j["prompt_tokens"].get<double>(), target, 0.03 * target) << j.dump();
        EXPECT_EQ(j["answer"].get<std::string>().size(), 7u);
    }
    std::remove(out.c_str());
}

}  // namespace

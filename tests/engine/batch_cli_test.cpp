// `qwenserve generate --input/--output` end to end: the binary runs a JSONL batch through the
// engine on a dummy-weights model directory; greedy outputs must equal the single-sequence
// `generate --prompt-ids` mode, output lines come in input order with every field, text prompts
// tokenize through the model's tokenizer.json, and a bad line fails with its number and field
// (exit 2, no output file). Runs the binary through popen on the test thread.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "engine_test_util.h"
#include "../common/run_binary.h"
#include "model/weights_writer.h"

using namespace qs;
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

using test::RunResult;
RunResult run(const std::string& args) { return test::run_binary(args); }

// A byte-level BPE tokenizer.json without merges: token id b is byte b (GPT-2 byte alphabet).
std::string byte_tokenizer_json() {
    std::vector<int> printable;
    for (int b = 33; b <= 126; ++b) printable.push_back(b);
    for (int b = 161; b <= 172; ++b) printable.push_back(b);
    for (int b = 174; b <= 255; ++b) printable.push_back(b);
    std::vector<uint32_t> cp(256, 0);
    for (int b : printable) cp[size_t(b)] = uint32_t(b);
    uint32_t next = 256;
    for (int b = 0; b < 256; ++b)
        if (!cp[size_t(b)] && std::find(printable.begin(), printable.end(), b) == printable.end()) cp[size_t(b)] = next++;
    auto utf8 = [](uint32_t c) {
        std::string s;
        if (c < 0x80) {
            s += char(c);
        } else {
            s += char(0xC0 | (c >> 6));
            s += char(0x80 | (c & 0x3F));
        }
        return s;
    };
    json vocab = json::object();
    for (int b = 0; b < 256; ++b) vocab[utf8(cp[size_t(b)])] = b;
    json j = {{"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", json::array()}}},
              {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}}},
              {"decoder", {{"type", "ByteLevel"}}}};
    return j.dump();
}

std::vector<int32_t> single_mode_ids(const std::string& model, const std::vector<int32_t>& prompt, int max_tokens) {
    std::string ids;
    for (size_t i = 0; i < prompt.size(); ++i) ids += (i ? "," : "") + std::to_string(prompt[i]);
    RunResult r = run("generate --model " + model + " --prompt-ids " + ids + " --max-tokens " +
                      std::to_string(max_tokens) + " --ignore-eos");
    EXPECT_EQ(r.exit_code, 0) << r.output;
    const size_t at = r.output.find("ids: ");
    EXPECT_NE(at, std::string::npos) << r.output;
    std::vector<int32_t> out;
    std::stringstream ss(r.output.substr(at + 5, r.output.find('\n', at) - at - 5));
    for (std::string t; std::getline(ss, t, ',');) out.push_back(std::stoi(t));
    return out;
}

class BatchCli : public ::testing::Test {
protected:
    static void SetUpTestSuite() {
        dir_ = new std::string((fs::temp_directory_path() / ("qs_batch_cli_" + std::to_string(::getpid()))).string());
        fs::remove_all(*dir_);
        ASSERT_TRUE(save_model_dir(make_dummy_weights(test::engine_test_config(), 11), *dir_ + "/model").is_ok());
        std::ofstream(*dir_ + "/model/tokenizer.json") << byte_tokenizer_json();
    }
    static void TearDownTestSuite() {
        fs::remove_all(*dir_);
        delete dir_;
    }
    static std::string model() { return *dir_ + "/model"; }
    std::string write_input(const std::string& name, const std::vector<std::string>& lines) {
        const std::string p = *dir_ + "/" + name;
        std::ofstream out(p);
        for (const auto& l : lines) out << l << '\n';
        return p;
    }
    static std::vector<json> read_lines(const std::string& path) {
        std::vector<json> out;
        std::ifstream in(path);
        for (std::string l; std::getline(in, l);) out.push_back(json::parse(l));
        return out;
    }
    static std::string* dir_;
};
std::string* BatchCli::dir_ = nullptr;

}  // namespace

TEST_F(BatchCli, GreedyEqualsSingleSequenceMode) {
    std::mt19937 rng(3);
    std::vector<std::vector<int32_t>> prompts;
    const std::vector<int32_t> shared = test::random_prompt(rng, 35, 512);
    for (int i = 0; i < 6; ++i) {
        std::vector<int32_t> p = i % 2 ? shared : std::vector<int32_t>{};
        auto tail = test::random_prompt(rng, 1 + int(rng() % 20), 512);
        p.insert(p.end(), tail.begin(), tail.end());
        prompts.push_back(p);
    }
    const int kMaxTokens = 10;
    std::vector<std::string> lines;
    for (size_t i = 0; i < prompts.size(); ++i)
        lines.push_back(json({{"id", "q" + std::to_string(i)}, {"prompt_ids", prompts[i]}, {"temperature", 0},
                              {"max_tokens", kMaxTokens}, {"ignore_eos", true}})
                            .dump());
    const std::string in = write_input("greedy.jsonl", lines), out = *dir_ + "/greedy_out.jsonl";
    std::vector<std::vector<int32_t>> want;
    for (const auto& p : prompts) want.push_back(single_mode_ids(model(), p, kMaxTokens));

    // Neither mode names a K/V dtype: both take EngineConfig's one default (bf16), so they agree.
    for (const std::string engine_flags : {"", " --max-num-batched-tokens 16 --max-num-seqs 3",
                                           " --num-speculative-tokens 2", " --no-prefix-caching"}) {
        fs::remove(out);
        RunResult r = run("generate --model " + model() + " --input " + in + " --output " + out + engine_flags);
        ASSERT_EQ(r.exit_code, 0) << r.output;
        EXPECT_NE(r.output.find("completion tokens: " + std::to_string(kMaxTokens * prompts.size())),
                  std::string::npos)
            << r.output;
        if (engine_flags.find("speculative") != std::string::npos) {
            EXPECT_NE(r.output.find("MTP draft 2:"), std::string::npos) << r.output;
        }
        const std::vector<json> got = read_lines(out);
        ASSERT_EQ(got.size(), prompts.size());
        for (size_t i = 0; i < got.size(); ++i) {
            EXPECT_EQ(got[i]["id"], "q" + std::to_string(i));
            EXPECT_EQ(got[i]["index"], 0);
            EXPECT_EQ(got[i]["prompt_tokens"], prompts[i].size());
            EXPECT_EQ(got[i]["token_ids"].get<std::vector<int32_t>>(), want[i]) << "line " << i + 1 << engine_flags;
            EXPECT_EQ(got[i]["finish_reason"], "length");
            EXPECT_EQ(got[i]["stop_reason"], "");
            EXPECT_TRUE(got[i]["text"].is_string());
            EXPECT_TRUE(got[i]["cached_prompt_tokens"].is_number_integer());
        }
        EXPECT_FALSE(fs::exists(out + ".tmp"));
    }
}

TEST_F(BatchCli, SamplingFieldsNAndLogprobs) {
    const std::string in = write_input(
        "sample.jsonl",
        {R"({"prompt_ids": [1, 2, 3], "n": 3, "seed": 7, "temperature": 0.8, "top_p": 0.9, "top_k": 50, )"
         R"("max_tokens": 5, "ignore_eos": true, "logprobs": 2})",
         R"({"id": "b", "prompt_ids": [4, 5], "max_tokens": 4, "stop_token_ids": [7], "min_p": 0.1, )"
         R"("presence_penalty": 0.5, "frequency_penalty": 0.5, "repetition_penalty": 1.2})"});
    const std::string out = *dir_ + "/sample_out.jsonl";
    RunResult r = run("generate --model " + model() + " --input " + in + " --output " + out);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    const std::vector<json> got = read_lines(out);
    ASSERT_EQ(got.size(), 4u);
    for (int k = 0; k < 3; ++k) {
        EXPECT_EQ(got[size_t(k)]["id"], "line-1");
        EXPECT_EQ(got[size_t(k)]["index"], k);
        EXPECT_EQ(got[size_t(k)]["token_ids"].size(), 5u);
        EXPECT_EQ(got[size_t(k)]["logprobs"].size(), 5u);
        EXPECT_EQ(got[size_t(k)]["top_logprobs"][0].size(), 2u);
    }
    EXPECT_EQ(got[3]["id"], "b");
    EXPECT_FALSE(got[3].contains("logprobs"));
    // The same seed reproduces the same completions.
    const std::string out2 = *dir_ + "/sample_out2.jsonl";
    ASSERT_EQ(run("generate --model " + model() + " --input " + in + " --output " + out2).exit_code, 0);
    const std::vector<json> again = read_lines(out2);
    for (int k = 0; k < 3; ++k) EXPECT_EQ(again[size_t(k)]["token_ids"], got[size_t(k)]["token_ids"]);
}

TEST_F(BatchCli, TextPromptUsesTheTokenizer) {
    const std::string in = write_input(
        "text.jsonl", {R"({"id": "t", "prompt": "hello", "temperature": 0, "max_tokens": 6, "ignore_eos": true})",
                       R"({"id": "i", "prompt_ids": [104, 101, 108, 108, 111], "temperature": 0, )"
                       R"("max_tokens": 6, "ignore_eos": true})"});
    const std::string out = *dir_ + "/text_out.jsonl";
    RunResult r = run("generate --model " + model() + " --input " + in + " --output " + out);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    const std::vector<json> got = read_lines(out);
    ASSERT_EQ(got.size(), 2u);
    EXPECT_EQ(got[0]["prompt_tokens"], 5);
    EXPECT_EQ(got[0]["token_ids"], got[1]["token_ids"]);
    EXPECT_EQ(got[0]["text"], got[1]["text"]);
}

TEST_F(BatchCli, BadLineNamesLineAndFieldAndWritesNothing) {
    const std::string good = R"({"prompt_ids": [1, 2], "max_tokens": 2})";
    struct Case {
        std::string bad_line, needle;
    };
    const std::vector<Case> cases = {
        {R"({"prompt_ids": [1, 2)", "line 3: not valid JSON"},
        {R"({"prompt_ids": [1, 2], "temperature": "hot"})", "line 3: \"temperature\": must be a number"},
        {R"({"prompt_ids": [1, 2], "top_p": 0})", "line 3: \"top_p\": must be in (0, 1]"},
        {R"({"prompt_ids": [1, 2], "max_tokens": -1})", "line 3: \"max_tokens\""},
        {R"({"prompt_ids": [1, 2], "n": 0})", "line 3: \"n\""},
        {R"({"prompt_ids": [1, 2], "logprobs": 21})", "line 3: \"logprobs\""},
        {R"({"prompt_ids": [1, 512]})", "line 3: \"prompt_ids[1]\": token id 512 is outside the vocabulary"},
        {R"({"prompt_ids": [1, -4]})", "line 3: \"prompt_ids[1]\""},
        {R"({"prompt_ids": [1], "temprature": 1})", "line 3: \"temprature\": unknown field"},
        {R"({"max_tokens": 3})", "line 3: needs exactly one of \"prompt_ids\" and \"prompt\""},
        {R"({"id": "line-1", "prompt_ids": [3]})", "line 3: \"id\": duplicate id 'line-1'"},
        {R"({"prompt_ids": [1], "stop": 5})", "line 3: \"stop\""},
    };
    const std::string out = *dir_ + "/bad_out.jsonl";
    for (const Case& c : cases) {
        const std::string in = write_input("bad.jsonl", {good, "", c.bad_line, good});
        RunResult r = run("generate --model " + model() + " --input " + in + " --output " + out);
        EXPECT_EQ(r.exit_code, 2) << c.bad_line << "\n" << r.output;
        EXPECT_NE(r.output.find(c.needle), std::string::npos) << r.output;
        EXPECT_FALSE(fs::exists(out)) << c.bad_line;
        EXPECT_FALSE(fs::exists(out + ".tmp")) << c.bad_line;
    }
    // A text prompt without a tokenizer.json.
    const std::string no_tok = *dir_ + "/no_tok";
    fs::create_directories(no_tok);
    for (const char* f : {"config.json", "model.safetensors"}) fs::copy_file(model() + "/" + f, no_tok + "/" + f);
    const std::string in = write_input("text_bad.jsonl", {good, R"({"prompt": "hi"})"});
    RunResult r = run("generate --model " + no_tok + " --input " + in + " --output " + out);
    EXPECT_EQ(r.exit_code, 2) << r.output;
    EXPECT_NE(r.output.find("line 2: \"prompt\""), std::string::npos) << r.output;
    EXPECT_FALSE(fs::exists(out));
    // Both modes at once.
    r = run("generate --model " + model() + " --input " + in + " --output " + out + " --prompt-ids 1,2");
    EXPECT_EQ(r.exit_code, 2) << r.output;
}

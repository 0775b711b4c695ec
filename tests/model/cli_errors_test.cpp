// The `logits` and `generate` commands on bad input: one line naming the problem on stderr, a
// non-zero exit code, no crash and no partial output file.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "model/weights_writer.h"
#include "test_util.h"
#include "../common/run_binary.h"

using namespace qs;
namespace fs = std::filesystem;

namespace {

using test::RunResult;
RunResult run(const std::string& args) { return test::run_binary(args); }

class CliErrors : public ::testing::Test {
protected:
    void SetUp() override {
        dir_ = (fs::temp_directory_path() / ("qs_cli_test_" + std::to_string(::getpid()))).string();
        fs::remove_all(dir_);
        ASSERT_TRUE(save_model_dir(make_dummy_weights(tiny_model_config(), 3), dir_ + "/model").is_ok());
        out_ = dir_ + "/out.npy";
    }
    void TearDown() override { fs::remove_all(dir_); }

    // The command must fail with exit code `code`, print `needle`, write no output file and
    // not crash (exit codes >= 128 are signals).
    void expect_failure(const std::string& args, int code, const std::string& needle) {
        RunResult r = run(args);
        EXPECT_EQ(r.exit_code, code) << r.output;
        EXPECT_NE(r.output.find(needle), std::string::npos) << r.output;
        EXPECT_FALSE(fs::exists(out_)) << args;
        EXPECT_FALSE(fs::exists(out_ + ".tmp")) << args;
    }

    std::string dir_, out_;
};

}  // namespace

TEST_F(CliErrors, LogitsWorksOnGoodInput) {
    RunResult r = run("logits --model " + dir_ + "/model --ids 1,2,3 --out " + out_);
    EXPECT_EQ(r.exit_code, 0) << r.output;
    EXPECT_TRUE(fs::exists(out_));
}

TEST_F(CliErrors, IdOutsideVocabulary) {
    expect_failure("logits --model " + dir_ + "/model --ids 1,2,512 --out " + out_, 2,
                   "token id 512 at index 2 is outside the vocabulary (vocab_size 512)");
    expect_failure("logits --model " + dir_ + "/model --ids 1,x --out " + out_, 2, "'x' is not an integer");
}

// (An absent field takes transformers' default, as transformers does: config_acceptance_test.)
TEST_F(CliErrors, ConfigFieldOfTheWrongType) {
    std::ifstream in(dir_ + "/model/config.json");
    std::string text((std::istreambuf_iterator<char>(in)), {});
    auto pos = text.find("\"hidden_size\"");
    ASSERT_NE(pos, std::string::npos);
    const size_t value = text.find_first_of("0123456789", pos);
    const size_t end = text.find_first_not_of("0123456789", value);
    text.replace(value, end - value, "\"" + text.substr(value, end - value) + "\"");
    std::ofstream(dir_ + "/model/config.json") << text;
    expect_failure("logits --model " + dir_ + "/model --ids 1,2 --out " + out_, 3,
                   "config.json: text_config.hidden_size must be an integer");
}

TEST_F(CliErrors, CorruptSafetensors) {
    fs::resize_file(dir_ + "/model/model.safetensors", 1000);
    expect_failure("logits --model " + dir_ + "/model --ids 1,2 --out " + out_, 3, "model.safetensors");
}

TEST_F(CliErrors, WrongTensorShape) {
    // A checkpoint of a config whose hidden size differs from the config.json it ships with.
    ModelConfig other = tiny_model_config();
    other.moe_intermediate_size = 16;
    ASSERT_TRUE(save_model_dir(make_dummy_weights(other, 3), dir_ + "/other").is_ok());
    fs::copy_file(dir_ + "/model/config.json", dir_ + "/other/config.json", fs::copy_options::overwrite_existing);
    expect_failure("logits --model " + dir_ + "/other --ids 1,2 --out " + out_, 3,
                   "mlp.experts.gate_up_proj has shape [8, 32, 64] but the config implies [8, 64, 64]");
}

TEST_F(CliErrors, BadOptions) {
    expect_failure("logits --model " + dir_ + "/model --ids 1,2,3 --incremental-from 4 --out " + out_, 2,
                   "--incremental-from must be in [1, 3]");
    expect_failure("logits --model " + dir_ + "/nope --ids 1 --out " + out_, 2, "nope");
    expect_failure("logits --bogus 1", 2, "unknown option --bogus");
    expect_failure("generate --model " + dir_ + "/model --prompt-ids 1 --max-tokens 0", 2, "--max-tokens must be at least 1");
}

// The GPU-backend options are checked before any GPU is needed, so these errors are the same on
// a machine without one: a value out of range, a GPU option with the CPU backend, a state dtype
// that does not exist, and an f32 K/V cache asked of the GPU server.
TEST_F(CliErrors, GpuBackendOptions) {
    const std::string model = "--model " + dir_ + "/model ";
    expect_failure("generate " + model + "--prompt-ids 1,2 --cuda-graph-max-batch 4", 2,
                   "--cuda-graph-max-batch is only for --device cuda");
    expect_failure("generate " + model + "--prompt-ids 1,2 --device cuda --cuda-graph-max-batch -1", 2,
                   "--cuda-graph-max-batch must be in [0, 4096]");
    expect_failure("generate " + model + "--prompt-ids 1,2 --int4-expert-copies none", 2,
                   "--int4-expert-copies is only for --device cuda");
    expect_failure("generate " + model + "--prompt-ids 1,2 --device cuda --int4-expert-copies some", 2,
                   "--int4-expert-copies");
    expect_failure("generate " + model + "--prompt-ids 1,2 --gdn-state-dtype fp16", 2,
                   "--gdn-state-dtype must be 'f32' or 'bf16', got 'fp16'");
    // serve needs a tokenizer before it reaches the engine: the trained tiny model has one.
    expect_failure("serve --model " + std::string(QS_SOURCE_DIR) + "/models/qwen36-tiny --port 0 --device cuda "
                   "--kv-cache-dtype f32", 2,
                   "--kv-cache-dtype f32 is CPU-only; on --device cuda use bf16 or fp8_e4m3");
}

// `capacity` counts the recurrent state at its stored size: bf16 halves the 32 × 128 × 128
// state of each of the 30 GDN layers (spec numbers: 34,406,400 bytes per sequence, fp32 65,863,680).
TEST_F(CliErrors, CapacityWithBf16State) {
    RunResult r = run("capacity --model builtin:qwen36-35b-a3b --cache-memory-mb 60000 --no-prefix-caching "
                      "--gdn-state-dtype bf16");
    EXPECT_EQ(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find("| 34.41 |"), std::string::npos) << r.output;
    RunResult f = run("capacity --model builtin:qwen36-35b-a3b --cache-memory-mb 60000 --no-prefix-caching");
    EXPECT_EQ(f.exit_code, 0) << f.output;
    EXPECT_NE(f.output.find("| 65.86 |"), std::string::npos) << f.output;
}

// The qwenserve binary explains itself (issue 20): `--help` / `-h` on every command prints every
// option with its default and QS_* variable and exits 0; `qwenserve --help` and `qwenserve help
// CMD` list the commands and show one; `--version` names the version and build. The expected
// option names are written out here by hand (from the README and docs), not taken from the
// tables under test.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>

#include "../common/test_files.h"
#include "../common/run_binary.h"
#include "test_util.h"

using namespace qs;
using test::run_binary;

namespace {

std::string env_of(const std::string& option) {
    std::string s = "QS_";
    for (char c : option) s += c == '-' ? '_' : char(std::toupper(static_cast<unsigned char>(c)));
    return s;
}

const std::vector<std::string> kEngineOptions = {
    "max-num-seqs",        "max-num-batched-tokens", "max-prefill-tokens-with-decodes",   "max-model-len",  "kv-block-size",   "max-waiting",
    "num-speculative-tokens", "speculative-disable-by-batch-size", "num-state-snapshots", "grammar-mask-threads", "cache-memory-mb", "num-kv-blocks",  "gpu-memory-utilization",
    "benchmark-mtp-acceptance", "kv-cache-dtype",      "gdn-state-dtype", "no-chunked-prefill", "no-prefix-caching",
    "no-mtp-overlap", "mtp-spare-slots"};
const std::vector<std::string> kModelOptions = {"model", "load-format", "dummy-format", "dummy-vision", "seed", "num-layers", "no-mtp",
                                                "device", "cuda-graph-max-batch", "int4-expert-copies"};
const std::vector<std::string> kServeOptions = {
    "host", "port", "api-key", "served-model-name", "tokenizer", "chat-template", "scheduling-policy", "io-threads", "worker-threads", "max-body-bytes",
    "stream-buffer-bytes", "max-in-flight", "idle-timeout-s", "write-stall-timeout-s", "shutdown-grace-s",
    "disable-log-requests", "log-prompts", "allowed-local-media-path", "allow-remote-images", "max-image-bytes",
    "max-image-pixels", "max-images-per-request", "max-video-frames", "max-video-bytes", "video-frame-list-fps", "remote-image-timeout-s", "remote-ca-file", "fake-engine", "fake-step-ms", "fake-load-s", "log-level", "log-format"};

void expect_documented(const std::string& help, const std::vector<std::string>& options) {
    for (const auto& o : options) {
        EXPECT_TRUE(std::regex_search(help, std::regex("\n  --" + o + "[ \n]"))) << "--" << o << " missing:\n" << help;
        EXPECT_NE(help.find("env: " + env_of(o)), std::string::npos) << env_of(o) << " missing";
    }
}

}  // namespace

TEST(CliHelp, ServeHelpListsEveryOptionWithItsVariable) {
    auto r = run_binary("serve --help");
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_EQ(r.output.rfind("usage: qwenserve serve", 0), 0u) << r.output;
    expect_documented(r.output, kServeOptions);
    expect_documented(r.output, kModelOptions);
    expect_documented(r.output, kEngineOptions);
    // Defaults as the README states them.
    auto tail = [&](const std::string& head, const std::string& var) {
        return std::regex_search(r.output, std::regex("\n      " + head + "(; [^\n]*)?; env: " + var + "\n"));
    };
    EXPECT_TRUE(tail("default: 8000", "QS_PORT")) << r.output;
    EXPECT_TRUE(tail("default: 127.0.0.1", "QS_HOST"));
    EXPECT_TRUE(tail("default: 512", "QS_MAX_NUM_SEQS"));
    EXPECT_TRUE(tail("default: bf16", "QS_KV_CACHE_DTYPE"));
    EXPECT_TRUE(tail("required", "QS_MODEL"));
    EXPECT_NE(r.output.find("allowed: in (0, 1]; env: QS_GPU_MEMORY_UTILIZATION"), std::string::npos);
}

TEST(CliHelp, ShortHelpAndHelpCommandPrintTheSame) {
    const auto long_form = run_binary("serve --help");
    const auto short_form = run_binary("serve -h");
    const auto help_cmd = run_binary("help serve");
    EXPECT_EQ(short_form.exit_code, 0) << short_form.output;
    EXPECT_EQ(help_cmd.exit_code, 0) << help_cmd.output;
    EXPECT_EQ(short_form.output, long_form.output);
    EXPECT_EQ(help_cmd.output, long_form.output);
}

TEST(CliHelp, EveryCommandHasHelp) {
    for (const std::string cmd : {"serve", "generate", "logits", "capacity", "tokenize", "quantize", "bench",
                                  "bench fixture", "campaign", "campaign sweep", "campaign record", "campaign compare",
                                  "campaign report"}) {
        auto r = run_binary(cmd + " --help");
        EXPECT_EQ(r.exit_code, 0) << cmd << ": " << r.output;
        EXPECT_EQ(r.output.rfind("usage: qwenserve " + cmd, 0), 0u) << cmd << ": " << r.output;
        EXPECT_NE(r.output.find("--log-level"), std::string::npos) << cmd;
        auto h = run_binary("help " + cmd);
        EXPECT_EQ(h.exit_code, 0) << cmd;
        EXPECT_EQ(h.output, r.output) << cmd;
    }
    expect_documented(run_binary("generate --help").output, kEngineOptions);
    expect_documented(run_binary("capacity --help").output, kEngineOptions);
    expect_documented(run_binary("generate --help").output, {"prompt-ids", "max-tokens", "ignore-eos", "input", "output"});
    expect_documented(run_binary("logits --help").output,
                      {"ids", "out", "incremental-from", "mtp-out", "kv-cache-dtype", "gdn-state-dtype"});
    expect_documented(run_binary("quantize --help").output,
                      {"model", "output", "format", "scale-dtype", "group-size", "shard-size-mb"});
    expect_documented(run_binary("tokenize --help").output,
                      {"tokenizer", "decode", "add-special-tokens", "skip-special-tokens", "hex", "chat", "template",
                       "benchmark", "repeat"});
    expect_documented(run_binary("bench --help").output,
                      {"url", "fixture", "clients", "requests", "passes", "threads", "gpu-hourly-cost", "api-key",
                       "json-out", "pass-timeout-s"});
    const auto sweep = run_binary("campaign sweep --help").output;
    expect_documented(sweep, {"ledger", "fixture", "model", "grid-file", "clients", "requests", "warmup-requests",
                              "endurance-requests", "screen", "port", "threads", "start-timeout-s", "stop-timeout-s",
                              "pass-timeout-s", "gpu-hourly-cost", "api-key", "sweep-id", "log-dir"});
    EXPECT_NE(sweep.find("--grid KNOB=V1,V2"), std::string::npos) << sweep;
}

TEST(CliHelp, TopLevelHelpListsCommands) {
    for (const std::string form : {"--help", "-h", "help"}) {
        auto r = run_binary(form);
        EXPECT_EQ(r.exit_code, 0) << form << r.output;
        for (const char* cmd : {"serve", "generate", "logits", "capacity", "tokenize", "quantize", "bench", "campaign"})
            EXPECT_NE(r.output.find(std::string("\n  ") + cmd + " "), std::string::npos) << form << ": " << cmd;
        EXPECT_NE(r.output.find("campaign sweep"), std::string::npos);
    }
    auto none = run_binary("");
    EXPECT_EQ(none.exit_code, 2);
    EXPECT_NE(none.output.find("usage: qwenserve <command>"), std::string::npos);
    auto unknown = run_binary("help nosuch");
    EXPECT_EQ(unknown.exit_code, 2);
    EXPECT_NE(unknown.output.find("unknown command 'nosuch'"), std::string::npos) << unknown.output;
}

TEST(CliHelp, UsageErrorsPointAtHelp) {
    auto r = run_binary("serve --bogus 1");
    EXPECT_EQ(r.exit_code, 2);
    EXPECT_NE(r.output.find("qwenserve serve: unknown option --bogus (see 'qwenserve serve --help')"), std::string::npos)
        << r.output;
    r = run_binary("serve");
    EXPECT_EQ(r.exit_code, 2);
    EXPECT_NE(r.output.find("missing required option --model"), std::string::npos) << r.output;
    r = run_binary("serve --model x --log-level loud");
    EXPECT_EQ(r.exit_code, 2);
    EXPECT_NE(r.output.find("--log-level must be 'error', 'warn', 'info' or 'debug', got 'loud'"), std::string::npos)
        << r.output;
}

// --version: the version of project() in CMakeLists.txt, a git commit of this repository that
// HEAD contains, and whether the CUDA backend is in (QS_HAVE_CUDA of this build).
TEST(CliHelp, VersionNamesVersionCommitAndCuda) {
    auto r = run_binary("--version");
    ASSERT_EQ(r.exit_code, 0) << r.output;
    std::smatch m;
    const std::string cmake = qs::test::read_fixture(test::source_path("CMakeLists.txt"));
    ASSERT_TRUE(std::regex_search(cmake, m, std::regex(R"(project\(qwenserve VERSION ([0-9.]+))")));
    EXPECT_EQ(r.output.rfind("qwenserve " + m[1].str() + "\n", 0), 0u) << r.output;

    std::smatch h;
    ASSERT_TRUE(std::regex_search(r.output, h, std::regex("git ([0-9a-f]{12}|unknown)"))) << r.output;
    if (h[1] != "unknown") {
        const std::string git = "git -C '" + test::source_path("") + "' ";
        EXPECT_EQ(std::system((git + "cat-file -e " + h[1].str() + "^{commit}").c_str()), 0) << h[1];
        EXPECT_EQ(std::system((git + "merge-base --is-ancestor " + h[1].str() + " HEAD").c_str()), 0) << h[1];
    }
#ifdef QS_HAVE_CUDA
    EXPECT_NE(r.output.find("CUDA on (sm_"), std::string::npos) << r.output;
#else
    EXPECT_NE(r.output.find("CUDA off"), std::string::npos) << r.output;
#endif
}

// `--model ORG/NAME` through the binary: `capacity` reads the config of a snapshot in a fake
// Hugging Face cache (HF_HUB_CACHE), and an id that is not there fails with the download command.
TEST(CliHfModelId, CapacityFindsTheSnapshotAndNamesTheDownloadWhenAbsent) {
    namespace fs = std::filesystem;
    const fs::path hub = fs::temp_directory_path() / ("qs_cli_hub_" + std::to_string(::getpid()));
    fs::remove_all(hub);
    const fs::path snap = hub / "models--Tiny--Qwen36" / "snapshots" / "c0ffee";
    fs::create_directories(snap);
    fs::create_directories(hub / "models--Tiny--Qwen36" / "refs");
    std::ofstream(hub / "models--Tiny--Qwen36" / "refs" / "main") << "c0ffee";
    fs::copy_file(test::source_path("models/qwen36-tiny/config.json"), snap / "config.json");
    ::setenv("HF_HUB_CACHE", hub.string().c_str(), 1);
    const auto direct = run_binary("capacity --model " + test::source_path("models/qwen36-tiny"));
    const auto by_id = run_binary("capacity --model Tiny/Qwen36");
    const auto absent = run_binary("capacity --model Tiny/Missing");
    ::unsetenv("HF_HUB_CACHE");
    fs::remove_all(hub);
    ASSERT_EQ(direct.exit_code, 0) << direct.output;
    EXPECT_EQ(by_id.exit_code, 0) << by_id.output;
    // The same table (log lines, with their timestamps, left out).
    auto table = [](const std::string& out) {
        std::string t;
        std::istringstream lines(out);
        for (std::string l; std::getline(lines, l);)
            if (l.rfind("[", 0) != 0) t += l + "\n";
        return t;
    };
    EXPECT_NE(table(direct.output).find("| budget MB |"), std::string::npos) << direct.output;
    EXPECT_EQ(table(by_id.output), table(direct.output));
    EXPECT_NE(absent.exit_code, 0);
    EXPECT_NE(absent.output.find("hf download Tiny/Missing"), std::string::npos) << absent.output;
    EXPECT_NE(absent.output.find((hub / "models--Tiny--Missing" / "refs" / "main").string()), std::string::npos)
        << absent.output;
}

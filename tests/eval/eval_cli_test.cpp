// The eval subcommands through the real binary: `eval problems`, `eval code` against a live
// FakeEngine server, `eval compare` on crafted result files (the table, p and token medians),
// `eval power` (218 for a ten-point gap at discordance 0.28), `eval niah` with its table and
// HTML, `campaign report --niah`; and bad input: malformed JSONL, unreachable endpoint, missing
// options, each with its exit code and a message naming the problem.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "../common/test_files.h"
#include "../common/run_binary.h"
#include "../server/test_server.h"
#include "eval/sandbox.h"

namespace {

using qs::test::run_binary;

std::string tmp(const std::string& name) {
    return ::testing::TempDir() + "qs_eval_cli_" + std::to_string(::getpid()) + "_" + name;
}

int count_lines(const std::string& s) { return int(std::count(s.begin(), s.end(), '\n')); }

void write_results(const std::string& path,
                   const std::vector<std::tuple<std::string, bool, int>>& rows) {
    std::ofstream f(path);
    for (const auto& [id, passed, tokens] : rows)
        f << "{\"task_id\":\"" << id << "\",\"passed\":" << (passed ? "true" : "false")
          << ",\"completion_tokens\":" << tokens << ",\"reasoning_tokens\":" << tokens / 2
          << ",\"latency_s\":1.0}\n";
}

TEST(EvalCli, ProblemsAndCodeAgainstALiveServer) {
    if (!std::filesystem::exists("/usr/bin/python3") ||
        !qs::eval::check_sandbox_available().is_ok())
        GTEST_SKIP() << "no python3 or no namespaces";
    std::string problems = tmp("problems.jsonl"), out = tmp("results.jsonl");
    auto p = run_binary("eval problems --out " + problems);
    ASSERT_EQ(p.exit_code, 0) << p.output;
    EXPECT_EQ(count_lines(qs::test::read_if_exists(problems)), 10);
    qs::testing::TestServer server;
    std::string url = "http://127.0.0.1:" + std::to_string(server.port());
    // The fake engine does not write code: every problem ends as no_code, and the run succeeds.
    auto r = run_binary("eval code --url " + url + " --problems " + problems +
                        " --model test-model --out " + out + " --concurrency 4 --max-tokens 64");
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find("0 / 10 passed"), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("no_code"), std::string::npos) << r.output;
    EXPECT_EQ(count_lines(qs::test::read_if_exists(out)), 10);
    std::remove(problems.c_str());
    std::remove(out.c_str());
}

TEST(EvalCli, CodeBadInput) {
    std::string bad = tmp("bad.jsonl"), out = tmp("o.jsonl");
    std::ofstream(bad) << "{\"task_id\": \"a\", \"prompt\": \"p\", \"entry_point\": \"f\", "
                          "\"test\": \"t\"}\nnot json\n";
    auto r = run_binary("eval code --url http://127.0.0.1:1 --problems " + bad + " --out " + out);
    EXPECT_EQ(r.exit_code, 3) << r.output;
    EXPECT_NE(r.output.find(bad + ":2: not a JSON object"), std::string::npos) << r.output;
    auto missing =
        run_binary("eval code --url http://127.0.0.1:1 --problems /nonexistent.jsonl --out " + out);
    EXPECT_EQ(missing.exit_code, 2) << missing.output;
    EXPECT_EQ(run_binary("eval code --problems builtin --out " + out).exit_code, 2);  // no --url
    int port;
    {
        qs::testing::TestServer server;
        port = server.port();
    }
    auto unreachable = run_binary("eval code --url http://127.0.0.1:" + std::to_string(port) +
                                  " --out " + out + " --jobs 1");
    EXPECT_EQ(unreachable.exit_code, 3) << unreachable.output;
    EXPECT_NE(unreachable.output.find("no request reached"), std::string::npos)
        << unreachable.output;
    EXPECT_NE(run_binary("eval nonsense").exit_code, 0);
    std::remove(bad.c_str());
}

TEST(EvalCli, CompareTableAndTokens) {
    std::string a = tmp("a.jsonl"), b = tmp("b.jsonl");
    // 5 problems: both pass (p1), only A (p2, p3), only B (p4), both fail (p5); p6 only in B.
    write_results(a, {{"p1", true, 100},
                      {"p2", true, 200},
                      {"p3", true, 300},
                      {"p4", false, 400},
                      {"p5", false, 500}});
    write_results(b, {{"p1", true, 10},
                      {"p2", false, 20},
                      {"p3", false, 30},
                      {"p4", true, 40},
                      {"p5", false, 50},
                      {"p6", true, 60}});
    auto r = run_binary("eval compare " + a + " " + b + " --margin 0.05");
    ASSERT_EQ(r.exit_code, 1) << r.output;  // non-inferiority not shown
    EXPECT_NE(r.output.find("both pass 1, only A 2, only B 1, both fail 1"), std::string::npos)
        << r.output;
    EXPECT_NE(r.output.find("p = 1"), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("0 only in A and 1 only in B"), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("| completion tokens, total | 1500 | 150 | 0.10 |"), std::string::npos)
        << r.output;
    EXPECT_NE(r.output.find("| completion tokens, median | 300 | 30 | 0.10 |"), std::string::npos)
        << r.output;
    EXPECT_NE(r.output.find("NOT SHOWN"), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("only A passed: p2, p3"), std::string::npos) << r.output;
    EXPECT_EQ(run_binary("eval compare " + a + " " + b).exit_code, 0);  // no margin: a report
    // B equal to A on 200 problems with 5 + 5 discordant pairs: within a 10-point margin.
    {
        std::vector<std::tuple<std::string, bool, int>> ra, rb;
        for (int i = 0; i < 200; ++i) {
            bool pa = i < 100 || (i >= 190 && i < 195), pb = i < 100 || i >= 195;
            ra.emplace_back("q" + std::to_string(i), pa, 10);
            rb.emplace_back("q" + std::to_string(i), pb, 10);
        }
        write_results(a, ra);
        write_results(b, rb);
        auto ok = run_binary("eval compare " + a + " " + b + " --margin 0.10 --alpha 0.10");
        EXPECT_EQ(ok.exit_code, 0) << ok.output;
        EXPECT_NE(ok.output.find("B IS NOT WORSE"), std::string::npos) << ok.output;
    }

    std::ofstream(b)
        << "{\"task_id\":\"p1\",\"passed\":true}\n{\"task_id\":\"p1\",\"passed\":true}\n";
    auto dup = run_binary("eval compare " + a + " " + b);
    EXPECT_EQ(dup.exit_code, 3) << dup.output;
    EXPECT_NE(dup.output.find("appears twice"), std::string::npos) << dup.output;
    std::ofstream(b) << "{\"task_id\":\"p1\"}\n";
    auto bad = run_binary("eval compare " + a + " " + b);
    EXPECT_EQ(bad.exit_code, 3) << bad.output;
    EXPECT_NE(bad.output.find(":1:"), std::string::npos) << bad.output;
    EXPECT_EQ(run_binary("eval compare " + a).exit_code, 2);
    std::remove(a.c_str());
    std::remove(b.c_str());
}

TEST(EvalCli, PowerReproducesTheTwoHundredEighteen) {
    auto r =
        run_binary("eval power --difference 0.10 --discordance 0.28 --power 0.80 --alpha 0.05");
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find("Connor (1987) normal approximation: n = 218"), std::string::npos)
        << r.output;
    EXPECT_NE(r.output.find("first n with power >= 0.80: 231"), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("discordance psi"), std::string::npos);
    auto bad = run_binary("eval power --difference 0.10 --discordance 0.05");
    EXPECT_EQ(bad.exit_code, 2) << bad.output;
    EXPECT_NE(bad.output.find("discordance"), std::string::npos) << bad.output;
}

TEST(EvalCli, NiahTableHtmlAndCampaignReport) {
    qs::testing::TestServer server;
    std::string url = "http://127.0.0.1:" + std::to_string(server.port());
    std::string out = tmp("niah.jsonl"), html = tmp("niah.html"), md = tmp("niah.md");
    auto r = run_binary("eval niah --url " + url + " --model test-model --out " + out +
                        " --lengths 400,1200 --depths 0,0.5,1 --max-model-len 4096 "
                        "--needle '[[reply:{answer}]]' --html " +
                        html + " --markdown " + md);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_EQ(count_lines(qs::test::read_if_exists(out)), 6);
    EXPECT_NE(r.output.find("| 1200 |"), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("1/1 | 1/1 | 1/1 | 3/3 |"), std::string::npos) << r.output;
    EXPECT_NE(qs::test::read_if_exists(html).find("<svg"), std::string::npos);
    EXPECT_NE(qs::test::read_if_exists(md).find("| target tokens |"), std::string::npos);

    // The campaign report includes the heatmap.
    std::string ledger = tmp("ledger.jsonl"), report = tmp("report.html");
    std::ofstream(ledger) << R"({"config":"A@c4","run":"1","experiment":"e1","fresh_start":true,)"
                          << R"("steady_output_throughput":100,"output_throughput":90,)"
                          << R"("completed":8,"num_requests":8,"clients":4})"
                          << "\n";
    auto rep =
        run_binary("campaign report --ledger " + ledger + " --output " + report + " --niah " + out);
    ASSERT_EQ(rep.exit_code, 0) << rep.output;
    std::string page = qs::test::read_if_exists(report);
    EXPECT_NE(page.find("Needle in a haystack"), std::string::npos);
    EXPECT_NE(page.find("needle depth"), std::string::npos);

    auto ctx = run_binary("eval niah --url " + url + " --out " + out +
                          " --lengths 5000 --max-model-len 4096");
    EXPECT_EQ(ctx.exit_code, 2) << ctx.output;
    EXPECT_NE(ctx.output.find("exceeds the context"), std::string::npos) << ctx.output;
    auto rerender = run_binary("eval niah --results " + out);
    EXPECT_EQ(rerender.exit_code, 0) << rerender.output;
    for (const auto& f : {out, html, md, ledger, report}) std::remove(f.c_str());
}

}  // namespace

namespace {

// Every eval command explains itself; the option names are written out here from docs/BENCH.md,
// not taken from the tables under test.
TEST(EvalCli, HelpListsEveryOption) {
    const std::vector<std::pair<std::string, std::vector<std::string>>> commands = {
        {"eval", {}},
        {"eval code", {"url",          "out",
                       "problems",     "model",
                       "concurrency",  "max-tokens",
                       "temperature",  "top-p",
                       "seed",         "thinking",
                       "api-key",      "timeout-s",
                       "jobs",         "threads",
                       "prompt-field", "python",
                       "wall-s",       "cpu-s",
                       "memory-mb",    "file-mb",
                       "work-dir",     "no-network-isolation"}},
        {"eval problems", {"out"}},
        {"eval compare", {"alpha", "margin"}},
        {"eval power", {"difference", "discordance", "pass-rate", "alpha", "power", "max-n"}},
        {"eval niah",
         {"url", "out", "results", "lengths", "depths", "samples", "max-model-len", "max-tokens",
          "concurrency", "seed", "model", "api-key", "timeout-s", "chars-per-token",
          "overhead-tokens", "needle", "markdown", "html"}},
    };
    for (const auto& [cmd, options] : commands) {
        auto r = run_binary(cmd + " --help");
        EXPECT_EQ(r.exit_code, 0) << cmd << ": " << r.output;
        EXPECT_EQ(r.output.rfind("usage: qwenserve " + cmd, 0), 0u) << cmd << ": " << r.output;
        for (const auto& o : options)
            EXPECT_NE(r.output.find("\n  --" + o), std::string::npos) << cmd << " --" << o;
        EXPECT_EQ(run_binary("help " + cmd).output, r.output) << cmd;
    }
    auto top = run_binary("--help");
    EXPECT_NE(top.output.find("\n  eval "), std::string::npos) << top.output;
    EXPECT_NE(top.output.find("eval niah"), std::string::npos) << top.output;
    auto bad = run_binary("eval code --url http://x:1 --out o --bogus 1");
    EXPECT_EQ(bad.exit_code, 2);
    EXPECT_NE(bad.output.find("unknown option --bogus"), std::string::npos) << bad.output;
}

}  // namespace

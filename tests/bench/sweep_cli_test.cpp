// `qwenserve campaign sweep` end to end: the binary starts `qwenserve serve --fake-engine`
// (scripted replies, no model) for each grid point, takes it through the gates, writes the
// ledger and per-point logs, and stops it. Covered: a 2-point grid that passes (ledger lines,
// knobs, gates, logs, then `campaign report` on that ledger); a point whose server refuses its
// knob value (failed with the server's own message); a knob serve does not know (refused before
// anything starts); a looping server caught by the endurance pass's output screen; Ctrl-C and
// SIGKILL of the sweep leaving no server behind. Waits are bounded polls, never assertions on
// time.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "../common/test_files.h"
#include "../common/run_binary.h"
#include "bench/sweep.h"

namespace {

namespace fs = std::filesystem;

class SweepCli : public ::testing::Test {
   protected:
    void SetUp() override {
        dir_ = ::testing::TempDir() + "qs_sweep_cli_" + std::to_string(::getpid()) + "_" +
               ::testing::UnitTest::GetInstance()->current_test_info()->name();
        fs::remove_all(dir_);
        fs::create_directories(dir_);
    }
    void TearDown() override {
        if (!HasFailure()) fs::remove_all(dir_);
    }
    std::string path(const std::string& name) const { return dir_ + "/" + name; }

    // A fixture of n chat requests whose prompt holds `script` (the fake engine's directive).
    std::string fixture(int n, const std::string& script, int max_tokens) const {
        std::string f = path("fixture.jsonl");
        std::ofstream out(f);
        for (int i = 0; i < n; ++i) {
            nlohmann::json body = {
                {"model", "builtin:tiny"},
                {"max_tokens", max_tokens},
                {"messages",
                 {{{"role", "user"}, {"content", script + " request " + std::to_string(i)}}}}};
            out << nlohmann::json{{"endpoint", "/v1/chat/completions"}, {"body", body}}.dump()
                << "\n";
        }
        return f;
    }

    std::string sweep_args(const std::string& fixture_path, const std::string& grid,
                           const std::string& more = "") const {
        return "campaign sweep --ledger " + path("ledger.jsonl") + " --fixture " + fixture_path +
               " --model builtin:tiny " + grid +
               " --clients 2 --requests 6 --warmup-requests 4 --threads 1 --sweep-id t"
               " --start-timeout-s 120 --stop-timeout-s 30 --pass-timeout-s 120 " +
               more + " -- --fake-engine --fake-step-ms 1";
    }

    std::vector<nlohmann::json> ledger() const {
        std::vector<nlohmann::json> v;
        std::ifstream in(path("ledger.jsonl"));
        for (std::string line; std::getline(in, line);)
            if (!line.empty()) v.push_back(nlohmann::json::parse(line));
        return v;
    }

    std::string dir_;
};

bool all_gates_passed(const nlohmann::json& e, const std::vector<std::string>& names) {
    std::vector<std::string> seen;
    for (const auto& g : e["gates"]) {
        if (!g["passed"].get<bool>()) return false;
        seen.push_back(g["name"]);
    }
    return seen == names;
}

TEST_F(SweepCli, TwoPointGridEndToEndThenReport) {
    auto r = qs::test::run_binary(sweep_args(
        fixture(5, "[[reply:The answer is here.]]", 32), "--grid max_num_seqs=4,8",
        "--endurance-requests 6 --screen --gpu-hourly-cost 3.6 --log-dir " + path("logs")));
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find("sweep summary"), std::string::npos) << r.output;
    auto l = ledger();
    ASSERT_EQ(l.size(), 4u) << r.output;  // 2 points x 1 client count x 2 measured passes
    const std::vector<std::string> gates = {"start",    "functional", "warmup",
                                            "measured", "endurance",  "stop"};
    for (size_t i = 0; i < 4; ++i) {
        const auto& e = l[i];
        const std::string p = i < 2 ? "4" : "8";
        EXPECT_EQ(e["status"], "ok");
        EXPECT_EQ(e["experiment"], i < 2 ? "t-p1" : "t-p2");
        EXPECT_EQ(e["config"], "max_num_seqs=" + p + "@c2");
        EXPECT_EQ(e["knobs"]["max_num_seqs"], p);
        EXPECT_EQ(e["clients"], 2);
        EXPECT_EQ(e["num_requests"], 6);
        EXPECT_EQ(e["completed"], 6);
        EXPECT_EQ(e["errors"], 0);
        EXPECT_GT(e["steady_output_throughput"].get<double>(), 0.0);
        EXPECT_GT(e["usd_per_m_completion_tokens_steady"].get<double>(), 0.0);
        EXPECT_TRUE(all_gates_passed(e, gates)) << e.dump();
    }
    for (const char* p : {"t-p1", "t-p2"}) {
        std::string log = qs::test::read_if_exists(path("logs/") + p + ".server.log");
        EXPECT_NE(log.find("--fake-engine"), std::string::npos) << p;   // the command line
        EXPECT_NE(log.find("listening on"), std::string::npos) << p;    // the server's own log
        EXPECT_NE(log.find("serve: stopped"), std::string::npos) << p;  // it exited cleanly
    }

    auto rep = qs::test::run_binary("campaign report --ledger " + path("ledger.jsonl") +
                                    " --output " + path("r.html") + " --markdown " + path("r.md"));
    ASSERT_EQ(rep.exit_code, 0) << rep.output;
    std::string html = qs::test::read_if_exists(path("r.html"));
    EXPECT_NE(html.find("<code>t-p1</code>"), std::string::npos);
    EXPECT_NE(html.find("<code>t-p2</code>"), std::string::npos);
    EXPECT_NE(html.find("<svg"), std::string::npos);
    EXPECT_NE(qs::test::read_if_exists(path("r.md")).find("| t-p2 |"), std::string::npos);
}

TEST_F(SweepCli, PointWhoseServerRefusesItsKnobIsRecordedAsFailed) {
    auto r = qs::test::run_binary(
        sweep_args(fixture(5, "[[reply:Fine.]]", 16), "--grid max_num_seqs=4,0"));
    EXPECT_EQ(r.exit_code, 1) << r.output;
    auto l = ledger();
    ASSERT_EQ(l.size(), 3u) << r.output;  // p1: 2 measured passes; p2: one failed line
    EXPECT_EQ(l[0]["status"], "ok");
    EXPECT_EQ(l[1]["status"], "ok");
    const auto& f = l[2];
    EXPECT_EQ(f["status"], "failed");
    EXPECT_EQ(f["experiment"], "t-p2");
    EXPECT_EQ(f["knobs"]["max_num_seqs"], "0");
    EXPECT_FALSE(f.contains("steady_output_throughput"));  // no numbers for a failed point
    const std::string reason = f["reason"];
    EXPECT_EQ(reason.rfind("start: server exit code 2 before /health", 0), 0u) << reason;
    EXPECT_NE(reason.find("max_num_seqs must be >= 1, got 0"), std::string::npos) << reason;
    EXPECT_NE(r.output.find("FAILED"), std::string::npos);
}

TEST_F(SweepCli, UnknownKnobIsRefusedBeforeAnythingStarts) {
    auto r = qs::test::run_binary(
        sweep_args(fixture(5, "[[reply:Fine.]]", 16), "--grid tensor_parallel_size=0.9,0.95"));
    EXPECT_EQ(r.exit_code, 2) << r.output;
    EXPECT_NE(r.output.find("unknown knob 'tensor_parallel_size'"), std::string::npos)
        << r.output;
    EXPECT_FALSE(fs::exists(path("ledger.jsonl")));
    // A knob the grid sweeps may not also be in the serve arguments.
    auto clash = qs::test::run_binary(sweep_args(fixture(5, "x", 16), "--grid max_num_seqs=4", "") +
                                      " --max-num-seqs 8");
    EXPECT_EQ(clash.exit_code, 2) << clash.output;
    EXPECT_NE(clash.output.find("which the grid sweeps"), std::string::npos) << clash.output;
}

TEST_F(SweepCli, EnduranceScreenFailsALoopingServer) {
    // "[[repeat]]" makes the fake engine emit "ab ab ab ..." up to max_tokens: 80 characters end
    // in a 3-character unit repeated 26 times, a loop by the screen's rule. Measured passes are
    // not screened here (no --screen), so the endurance pass is what fails the point.
    auto r = qs::test::run_binary(sweep_args(fixture(4, "[[repeat]]", 80), "--grid max_num_seqs=4",
                                             "--endurance-requests 4"));
    EXPECT_EQ(r.exit_code, 1) << r.output;
    auto l = ledger();
    ASSERT_EQ(l.size(), 1u) << r.output;
    EXPECT_EQ(l[0]["status"], "failed");
    const std::string reason = l[0]["reason"];
    EXPECT_EQ(reason.rfind("endurance: output screen: 0 blank, 4 loop, 0 malformed of 4", 0), 0u)
        << reason;
    EXPECT_NE(r.output.find("loop: 'ab ' (3 chars) x 26 at the end"), std::string::npos)
        << r.output;
}

TEST_F(SweepCli, WithDummyWeightsTheScreenJudgesStreamsNotText) {
    // The same looping replies from a server told to load dummy weights: random text can end in
    // a run of one token, so the loop verdicts are reported in the gate but do not fail it.
    auto r = qs::test::run_binary(sweep_args(fixture(4, "[[repeat]]", 80), "--grid max_num_seqs=4",
                                             "--endurance-requests 4") +
                                  " --load-format dummy");
    EXPECT_EQ(r.exit_code, 0) << r.output;
    auto l = ledger();
    ASSERT_FALSE(l.empty()) << r.output;
    bool saw_endurance = false;
    for (const auto& g : l[0]["gates"]) {
        if (g["name"] != "endurance") continue;
        saw_endurance = true;
        EXPECT_TRUE(g["passed"].get<bool>());
        const std::string detail = g["detail"];
        EXPECT_NE(detail.find("content not judged: dummy weights"), std::string::npos) << detail;
        EXPECT_NE(detail.find("0 blank, 4 loop, 0 malformed of 4"), std::string::npos) << detail;
    }
    EXPECT_TRUE(saw_endurance) << r.output;
}

TEST(SweepDummyWeights, RecognisesBothSpellings) {
    using qs::bench::serves_dummy_weights;
    EXPECT_TRUE(serves_dummy_weights({"--fake-engine", "--load-format", "dummy"}));
    EXPECT_TRUE(serves_dummy_weights({"--load-format=dummy", "--port", "1"}));
    EXPECT_FALSE(serves_dummy_weights({"--load-format", "safetensors"}));
    EXPECT_FALSE(serves_dummy_weights({"--load-format"}));
    EXPECT_FALSE(serves_dummy_weights({"dummy", "--load-format"}));
    EXPECT_FALSE(serves_dummy_weights({}));
}

// Starts the sweep in the background with its output in a file; returns its pid.
pid_t spawn_sweep(const std::string& args, const std::string& out) {
    pid_t pid = ::fork();
    if (pid == 0) {
        int fd = ::open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
        ::dup2(fd, 1);
        ::dup2(fd, 2);
        ::execl("/bin/sh", "sh", "-c", ("exec " + std::string(QS_BINARY) + " " + args).c_str(),
                (char*)nullptr);
        ::_exit(127);
    }
    return pid;
}

// The server's pid from the sweep's "server pid N" line (bounded wait); 0 if it never came.
pid_t wait_server_pid(const std::string& out) {
    for (int i = 0; i < 3000; ++i) {
        std::string text = qs::test::read_if_exists(out);
        if (auto p = text.find("server pid "); p != std::string::npos)
            return pid_t(std::atoi(text.c_str() + p + 11));
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return 0;
}

// Dead: no such process, or a zombie nobody reaped yet (it no longer runs or holds its port).
bool dead(pid_t pid) {
    if (::kill(pid, 0) != 0 && errno == ESRCH) return true;
    std::string stat = qs::test::read_if_exists("/proc/" + std::to_string(pid) + "/stat");
    auto close = stat.rfind(')');
    return close != std::string::npos && close + 2 < stat.size() && stat[close + 2] == 'Z';
}

bool wait_dead(pid_t pid) {
    for (int i = 0; i < 3000 && !dead(pid); ++i)
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
    return dead(pid);
}

TEST_F(SweepCli, CtrlCStopsTheServerAndRecordsTheInterruption) {
    // --fake-load-s keeps /health at 503 for 10 minutes: the sweep is waiting when Ctrl-C comes.
    std::string out = path("out.txt");
    pid_t sweep = spawn_sweep(
        sweep_args(fixture(5, "x", 8), "--grid max_num_seqs=4,8") + " --fake-load-s 600", out);
    ASSERT_GT(sweep, 0);
    pid_t server = wait_server_pid(out);
    ASSERT_GT(server, 0) << qs::test::read_if_exists(out);
    ::kill(sweep, SIGINT);
    int status = 0;
    ASSERT_EQ(::waitpid(sweep, &status, 0), sweep);
    ASSERT_TRUE(WIFEXITED(status)) << qs::test::read_if_exists(out);
    EXPECT_EQ(WEXITSTATUS(status), 130) << qs::test::read_if_exists(out);
    EXPECT_TRUE(dead(server)) << "the sweep exited and left its server running";
    if (!dead(server)) ::kill(server, SIGKILL);  // do not leave it behind for 10 minutes
    auto l = ledger();
    ASSERT_EQ(l.size(), 1u) << qs::test::read_if_exists(out);  // the interrupted point; the second never started
    EXPECT_EQ(l[0]["status"], "failed");
    EXPECT_EQ(l[0]["reason"], "start: interrupted while waiting for /health");
}

TEST_F(SweepCli, KilledSweepTakesItsServerDown) {
    std::string out = path("out.txt");
    pid_t sweep = spawn_sweep(
        sweep_args(fixture(5, "x", 8), "--grid max_num_seqs=4") + " --fake-load-s 600", out);
    ASSERT_GT(sweep, 0);
    pid_t server = wait_server_pid(out);
    ASSERT_GT(server, 0) << qs::test::read_if_exists(out);
    ::kill(sweep, SIGKILL);  // no handler runs: only the child's parent-death signal helps
    int status = 0;
    ASSERT_EQ(::waitpid(sweep, &status, 0), sweep);
    EXPECT_TRUE(wait_dead(server)) << "orphaned server " << server << " still running";
    if (!dead(server)) ::kill(server, SIGKILL);
}

}  // namespace

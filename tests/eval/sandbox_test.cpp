// The sandbox's limits, each shown to bite and to be reported with its error class, and each
// with a control where the same program runs without the limit (so the test can fail): no
// network (a listening loopback socket of this process is unreachable inside, reachable
// outside), a CPU loop, a memory hog, a huge file, a sleeper past the wall clock, and a
// detached grandchild that must die with the sandbox.
#include "eval/code_exec.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <thread>

#include "eval/sandbox.h"

namespace qs::eval {
namespace {

const char* kPython = "/usr/bin/python3";

class Sandbox : public ::testing::Test {
   protected:
    void SetUp() override {
        if (!std::filesystem::exists(kPython)) GTEST_SKIP() << "no " << kPython;
        Status s = check_sandbox_available();
        ASSERT_TRUE(s.is_ok()) << s.message();
    }
    ExecResult run(const std::string& code, const std::string& test, const std::string& entry,
                   SandboxLimits limits = {}, bool keep = false) {
        ExecOptions o;
        o.python = kPython;
        o.limits = limits;
        o.keep_work_dir = keep;
        auto r = execute_solution(code, test, entry, o);
        EXPECT_TRUE(r.is_ok()) << r.status().message();
        return r.is_ok() ? *r : ExecResult{};
    }
};

TEST_F(Sandbox, PassAndAssertionAndSyntaxAndMissingEntryPoint) {
    const std::string test = "def check(c):\n    assert c(2, 3) == 5\n";
    auto ok = run("def add(a, b):\n    return a + b\n", test, "add");
    EXPECT_TRUE(ok.passed) << ok.error_class << ": " << ok.message;
    EXPECT_EQ(ok.error_class, "pass");
    auto wrong = run("def add(a, b):\n    return a - b\n", test, "add");
    EXPECT_FALSE(wrong.passed);
    EXPECT_EQ(wrong.error_class, "assertion_failed");
    EXPECT_EQ(run("def add(a, b) return a\n", test, "add").error_class, "syntax_error");
    EXPECT_EQ(run("def plus(a, b):\n    return a + b\n", test, "add").error_class,
              "missing_entry_point");
    EXPECT_EQ(run("def add(a, b):\n    return a / 0\n", test, "add").error_class,
              "runtime_error:ZeroDivisionError");
    // os._exit skips the tests: never a pass.
    EXPECT_EQ(run("import os\nos._exit(0)\n", test, "add").error_class, "exit:0");
}

TEST_F(Sandbox, UnittestAndTopLevelAssertStyles) {
    const std::string code = "def task_func(x):\n    return x * 2\n";
    const std::string ut =
        "import unittest\nclass TestCases(unittest.TestCase):\n    def test_a(self):\n"
        "        self.assertEqual(task_func(2), 4)\n    def test_b(self):\n"
        "        self.assertEqual(task_func(0), 0)\n";
    EXPECT_TRUE(run(code, ut, "task_func").passed);
    const std::string ut_bad =
        ut + "    def test_c(self):\n        self.assertEqual(task_func(1), 3)\n";
    EXPECT_EQ(run(code, ut_bad, "task_func").error_class, "assertion_failed");
    EXPECT_TRUE(run(code, "assert task_func(3) == 6\n", "task_func").passed);
    EXPECT_EQ(run(code, "assert task_func(3) == 7\n", "task_func").error_class, "assertion_failed");
}

TEST_F(Sandbox, RefusesNetwork) {
    // A listening socket of this process on 127.0.0.1: reachable from a plain child, not from
    // the sandbox (its network namespace has only a loopback that is down).
    int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
    ASSERT_EQ(::listen(fd, 4), 0);
    socklen_t len = sizeof(a);
    ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
    const int port = ntohs(a.sin_port);
    const std::string code =
        "import socket\ndef probe():\n    socket.create_connection(('127.0.0.1', " +
        std::to_string(port) + "), timeout=5).close()\n    return True\n";
    const std::string test = "def check(c):\n    assert c()\n";
    SandboxLimits open;
    open.isolate_network = false;
    auto control = run(code, test, "probe", open);
    EXPECT_TRUE(control.passed) << "control: " << control.error_class << ": " << control.message;
    auto r = run(code, test, "probe");
    EXPECT_FALSE(r.passed);
    EXPECT_EQ(r.error_class, "runtime_error:OSError");
    EXPECT_NE(r.message.find("Network is unreachable"), std::string::npos) << r.message;
    ::close(fd);
}

TEST_F(Sandbox, KillsACpuLoop) {
    SandboxLimits l;
    l.cpu_s = 1;
    l.wall_s = 20;
    auto r =
        run("def spin():\n    while True:\n        pass\n", "def check(c):\n    c()\n", "spin", l);
    EXPECT_EQ(r.error_class, "cpu_limit") << r.message;
    EXPECT_LT(r.wall_s, 15);
    EXPECT_GE(r.cpu_s, 0.5);  // the kernel's CPU accounting and the limit's tick differ a little
}

TEST_F(Sandbox, StopsAMemoryHog) {
    const std::string code = "def hog():\n    return bytearray(384 * 1024 * 1024)\n";
    const std::string test = "def check(c):\n    assert len(c()) > 0\n";
    SandboxLimits big;
    big.memory_bytes = int64_t(1) << 30;
    // The control shows the limit is what stops it (where 384 MiB are free).
    auto control = run(code, test, "hog", big);
    if (control.error_class != "memory_limit") {
        EXPECT_TRUE(control.passed) << control.error_class;
    }
    SandboxLimits l;
    l.memory_bytes = int64_t(256) << 20;
    auto r = run(code, test, "hog", l);
    EXPECT_EQ(r.error_class, "memory_limit") << r.message;
}

TEST_F(Sandbox, StopsAHugeFile) {
    const std::string code =
        "def write():\n    with open('big.bin', 'wb') as f:\n"
        "        for _ in range(64):\n            f.write(b'x' * (1 << 20))\n    return True\n";
    const std::string test = "def check(c):\n    assert c()\n";
    SandboxLimits big;
    big.file_bytes = int64_t(128) << 20;
    EXPECT_TRUE(run(code, test, "write", big).passed);
    SandboxLimits l;
    l.file_bytes = int64_t(4) << 20;
    auto r = run(code, test, "write", l);
    EXPECT_EQ(r.error_class, "file_size_limit") << r.message;
}

TEST_F(Sandbox, WallClockTimeout) {
    SandboxLimits l;
    l.wall_s = 1.0;
    auto r =
        run("import time\ndef nap():\n    time.sleep(60)\n", "def check(c):\n    c()\n", "nap", l);
    EXPECT_EQ(r.error_class, "timeout");
    EXPECT_LT(r.wall_s, 5);
}

TEST_F(Sandbox, DetachedGrandchildDiesWithTheSandbox) {
    // A child in its own session writes late.txt a second after the program ended. Without the
    // PID namespace (the control) it survives and writes; inside, init's exit kills it.
    const std::string code =
        "import subprocess\ndef spawn():\n"
        "    subprocess.Popen(['/bin/sh', '-c', 'sleep 1; echo late > late.txt'], "
        "start_new_session=True)\n    return True\n";
    const std::string test = "def check(c):\n    assert c()\n";
    SandboxLimits open;
    open.isolate_network = false;
    auto control = run(code, test, "spawn", open, /*keep=*/true);
    auto r = run(code, test, "spawn", {}, /*keep=*/true);
    EXPECT_TRUE(control.passed) << control.message;
    EXPECT_TRUE(r.passed) << r.message;
    std::this_thread::sleep_for(std::chrono::milliseconds(2500));
    EXPECT_TRUE(std::filesystem::exists(control.work_dir + "/late.txt"));
    EXPECT_FALSE(std::filesystem::exists(r.work_dir + "/late.txt"));
    std::error_code ec;
    std::filesystem::remove_all(control.work_dir, ec);
    std::filesystem::remove_all(r.work_dir, ec);
}

TEST(SandboxSetup, RefusesARelativeProgram) {
    EXPECT_FALSE(run_sandboxed({"python3"}, "/tmp", {}).is_ok());
}

}  // namespace
}  // namespace qs::eval

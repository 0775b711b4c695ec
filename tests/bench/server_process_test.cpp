// ServerProcess on plain shell children: exit codes and the log, exec failure, SIGTERM then
// SIGKILL for a child that ignores SIGTERM, its own process group, the destructor never leaving
// a child behind; health polling against a child that exits; the log tail.
#include "../common/test_files.h"
#include "bench/server_process.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <fstream>
#include <sstream>
#include <thread>

namespace qs::bench {
namespace {

std::string tmp(const std::string& name) {
    return ::testing::TempDir() + "qs_server_process_" + std::to_string(::getpid()) + "_" + name;
}

// Waits (bounded) for the child to exit by itself.
bool wait_exit(ServerProcess& p) {
    for (int i = 0; i < 1000 && p.running(); ++i)
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
    return !p.running();
}

bool gone(pid_t pid) { return ::kill(pid, 0) != 0 && errno == ESRCH; }

TEST(BenchServerProcess, ExitCodeAndLog) {
    std::string log = tmp("a.log");
    std::remove(log.c_str());
    auto p = ServerProcess::spawn({"/bin/sh", "-c", "echo hello; echo oops >&2; exit 3"}, log);
    ASSERT_TRUE(p.is_ok()) << p.status().message();
    ASSERT_TRUE(wait_exit(**p));
    EXPECT_EQ((*p)->exit_description(), "exit code 3");
    EXPECT_EQ(log_tail(log, 2), "hello | oops");
    EXPECT_EQ(log_tail(log, 1), "oops");
    auto stop = (*p)->stop(1);
    EXPECT_TRUE(stop.graceful);
    EXPECT_NE(stop.how.find("already exited"), std::string::npos);
    std::remove(log.c_str());
}

TEST(BenchServerProcess, ExecFailureIs127WithTheReasonInTheLog) {
    std::string log = tmp("b.log");
    auto p = ServerProcess::spawn({"/nonexistent/qwenserve", "serve"}, log);
    ASSERT_TRUE(p.is_ok());
    ASSERT_TRUE(wait_exit(**p));
    EXPECT_EQ((*p)->exit_description(), "exit code 127");
    EXPECT_NE(qs::test::read_if_exists(log).find("exec of the server failed"), std::string::npos);
    EXPECT_EQ(wait_healthy(**p, 1, 5), HealthWait::kExited);
    std::remove(log.c_str());
}

TEST(BenchServerProcess, StopTermThenKill) {
    std::string log = tmp("c.log");
    auto polite = ServerProcess::spawn({"/bin/sh", "-c", "exec sleep 60"}, log);
    ASSERT_TRUE(polite.is_ok());
    EXPECT_EQ(::getpgid((*polite)->pid()), (*polite)->pid());  // its own process group
    auto s1 = (*polite)->stop(20);
    EXPECT_TRUE(s1.graceful) << s1.how;
    EXPECT_EQ((*polite)->exit_description(), "killed by signal 15");

    // Ignores SIGTERM (an ignored disposition survives exec): killed after the timeout.
    std::remove(log.c_str());
    auto stubborn =
        ServerProcess::spawn({"/bin/sh", "-c", "trap '' TERM; echo ready; exec sleep 60"}, log);
    ASSERT_TRUE(stubborn.is_ok());
    for (int i = 0; i < 1000 && qs::test::read_if_exists(log).find("ready") == std::string::npos; ++i)
        std::this_thread::sleep_for(std::chrono::milliseconds(20));  // the trap is set
    auto s2 = (*stubborn)->stop(0.3);
    EXPECT_FALSE(s2.graceful);
    EXPECT_NE(s2.how.find("killed"), std::string::npos);
    EXPECT_EQ((*stubborn)->exit_description(), "killed by signal 9");
    std::remove(log.c_str());
}

TEST(BenchServerProcess, DestructorLeavesNoChild) {
    std::string log = tmp("d.log");
    pid_t pid = 0;
    {
        auto p = ServerProcess::spawn({"/bin/sh", "-c", "exec sleep 60"}, log);
        ASSERT_TRUE(p.is_ok());
        pid = (*p)->pid();
        EXPECT_TRUE((*p)->running());
    }
    EXPECT_TRUE(gone(pid));
    std::remove(log.c_str());
}

TEST(BenchServerProcess, PortsAndHealth) {
    auto port = pick_free_port();
    ASSERT_TRUE(port.is_ok());
    EXPECT_GT(*port, 0);
    EXPECT_EQ(http_get_status(*port, "/health", 1), 0);  // nobody listens there
}

}  // namespace
}  // namespace qs::bench

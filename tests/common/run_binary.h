// Runs the qwenserve binary (QS_BINARY, set by tests/CMakeLists.txt) with arguments and returns
// its exit code and combined stdout + stderr. Shared by the tests of the command-line tools.
#pragma once

#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <string>

namespace qs::test {

struct RunResult {
    int exit_code;       // 128 + signal when killed
    std::string output;  // stdout + stderr
};

inline RunResult run_binary(const std::string& args) {
    const std::string cmd = std::string(QS_BINARY) + " " + args + " 2>&1";
    FILE* p = popen(cmd.c_str(), "r");
    std::string out;
    std::array<char, 4096> buf;
    size_t n;
    while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) out.append(buf.data(), n);
    const int status = pclose(p);
    return {WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status), out};
}

}  // namespace qs::test

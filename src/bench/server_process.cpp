// Child server process, health polling and interrupt forwarding (see server_process.h).
#include "bench/server_process.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstring>
#include <deque>
#include <fstream>
#include <thread>

#include <fmt/format.h>

namespace qs::bench {

namespace {

using Clock = std::chrono::steady_clock;

// Shared with the signal handler: lock-free atomics are async-signal-safe.
std::atomic<pid_t> g_child{0};
std::atomic<int> g_interrupts{0};
static_assert(std::atomic<pid_t>::is_always_lock_free && std::atomic<int>::is_always_lock_free);

void on_interrupt(int) {
    int n = g_interrupts.fetch_add(1) + 1;
    if (pid_t c = g_child.load(); c > 0) ::kill(c, n == 1 ? SIGTERM : SIGKILL);
}

double seconds_since(Clock::time_point t) {
    return std::chrono::duration<double>(Clock::now() - t).count();
}

}  // namespace

void install_interrupt_handlers() {
    struct sigaction sa {};
    sa.sa_handler = on_interrupt;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    for (int sig : {SIGINT, SIGTERM, SIGHUP}) sigaction(sig, &sa, nullptr);
}

bool interrupted() { return g_interrupts.load() > 0; }

Result<std::unique_ptr<ServerProcess>> ServerProcess::spawn(const std::vector<std::string>& argv,
                                                            const std::string& log_path) {
    if (argv.empty()) return invalid_argument("no program to start");
    int log = ::open(log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (log < 0)
        return io_error(fmt::format("cannot open log '{}': {}", log_path, std::strerror(errno)));
    // Everything the child needs is prepared before fork: after it, only async-signal-safe calls.
    std::vector<char*> cargv;
    for (const auto& a : argv) cargv.push_back(const_cast<char*>(a.c_str()));
    cargv.push_back(nullptr);
    const pid_t parent = ::getpid();
    const pid_t pid = ::fork();
    if (pid < 0) {
        ::close(log);
        return io_error(fmt::format("fork failed: {}", std::strerror(errno)));
    }
    if (pid == 0) {
        ::setpgid(0, 0);  // the terminal's Ctrl-C goes to the sweep, which stops us in order
        ::prctl(PR_SET_PDEATHSIG, SIGTERM);
        if (::getppid() != parent) ::_exit(1);  // the parent died before prctl took effect
        sigset_t none;
        sigemptyset(&none);
        ::sigprocmask(SIG_SETMASK, &none, nullptr);
        int devnull = ::open("/dev/null", O_RDONLY);
        if (devnull >= 0) ::dup2(devnull, 0);
        ::dup2(log, 1);
        ::dup2(log, 2);
        ::execv(cargv[0], cargv.data());
        const char* msg = "campaign sweep: exec of the server failed: ";
        (void)!::write(2, msg, std::strlen(msg));
        const char* why = std::strerror(errno);
        (void)!::write(2, why, std::strlen(why));
        (void)!::write(2, "\n", 1);
        ::_exit(127);
    }
    ::close(log);
    ::setpgid(pid, pid);  // also here, so the group exists when spawn returns (no race)
    g_child = pid;
    if (interrupted()) ::kill(pid, SIGTERM);  // an interrupt raced with the start
    return std::unique_ptr<ServerProcess>(new ServerProcess(pid));
}

ServerProcess::~ServerProcess() {
    if (!exited_) stop(10);
}

void ServerProcess::reaped(int status) {
    exited_ = true;
    status_ = status;
    pid_t expected = pid_;
    g_child.compare_exchange_strong(expected, 0);
}

bool ServerProcess::running() {
    if (exited_) return false;
    int status = 0;
    pid_t r = ::waitpid(pid_, &status, WNOHANG);
    if (r == pid_) reaped(status);
    return !exited_;
}

std::string ServerProcess::exit_description() const {
    if (!exited_) return "running";
    if (WIFEXITED(status_)) return fmt::format("exit code {}", WEXITSTATUS(status_));
    if (WIFSIGNALED(status_)) return fmt::format("killed by signal {}", WTERMSIG(status_));
    return "stopped";
}

ServerProcess::StopResult ServerProcess::stop(double timeout_s) {
    StopResult r;
    if (!running()) {
        r.graceful = true;
        r.how = "had already exited (" + exit_description() + ")";
        return r;
    }
    const auto t0 = Clock::now();
    ::kill(pid_, SIGTERM);
    while (running() && seconds_since(t0) < timeout_s)
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
    if (!exited_) {
        ::kill(pid_, SIGKILL);
        int status = 0;
        while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
        }
        reaped(status);
        r.seconds = seconds_since(t0);
        r.how = fmt::format("killed: still running {:.0f} s after SIGTERM", timeout_s);
        return r;
    }
    r.seconds = seconds_since(t0);
    r.graceful = true;
    r.how = fmt::format("exited ({}) {:.2f} s after SIGTERM", exit_description(), r.seconds);
    return r;
}

int http_get_status(int port, const std::string& path, double timeout_s) {
    int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return 0;
    timeval tv{};
    tv.tv_sec = time_t(timeout_s);
    tv.tv_usec = suseconds_t((timeout_s - double(tv.tv_sec)) * 1e6);
    ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));  // also bounds connect()
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(uint16_t(port));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    int status = 0;
    if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0) {
        std::string req = fmt::format(
            "GET {} HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nConnection: close\r\n\r\n", path, port);
        if (::send(fd, req.data(), req.size(), MSG_NOSIGNAL) == ssize_t(req.size())) {
            std::string head;
            char buf[512];
            while (head.find("\r\n") == std::string::npos) {
                ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
                if (n <= 0) break;
                head.append(buf, size_t(n));
            }
            // "HTTP/1.1 200 OK"
            if (head.size() >= 12 && head.rfind("HTTP/", 0) == 0)
                status = std::atoi(head.c_str() + 9);
        }
    }
    ::close(fd);
    return status;
}

HealthWait wait_healthy(ServerProcess& process, int port, double timeout_s) {
    const auto t0 = Clock::now();
    for (;;) {
        if (interrupted()) return HealthWait::kInterrupted;
        if (!process.running()) return HealthWait::kExited;
        if (http_get_status(port, "/health", 2.0) == 200) return HealthWait::kHealthy;
        if (seconds_since(t0) >= timeout_s) return HealthWait::kTimeout;
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
}

Result<int> pick_free_port() {
    int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return io_error("socket() failed");
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(a);
    int port = 0;
    if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0 &&
        ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0)
        port = ntohs(a.sin_port);
    ::close(fd);
    if (port == 0) return io_error("no free loopback port");
    return port;
}

std::string log_tail(const std::string& path, int n, size_t max_bytes) {
    std::ifstream f(path, std::ios::binary);
    std::deque<std::string> lines;
    for (std::string line; std::getline(f, line);) {
        while (!line.empty() && (line.back() == '\r' || line.back() == ' ')) line.pop_back();
        if (line.empty() || line.rfind("# campaign sweep", 0) == 0) continue;  // our header
        lines.push_back(std::move(line));
        if (lines.size() > size_t(n)) lines.pop_front();
    }
    std::string out;
    for (const auto& l : lines) out += (out.empty() ? "" : " | ") + l;
    if (out.size() > max_bytes) out = "..." + out.substr(out.size() - max_bytes);
    return out;
}

}  // namespace qs::bench

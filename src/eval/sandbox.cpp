// The sandbox (see sandbox.h). Process tree: the caller forks A (own session, parent-death
// signal, stdio to files, unshare of the network and PID namespaces, uid/gid maps), A forks
// B (pid 1 of the new PID namespace: reaps everything, reports the program's wait status through a
// pipe, and its exit tears the namespace down), B forks C (limits, drop to nobody when root, exec).
// Between fork and exec only async-signal-safe calls: everything that allocates is prepared first.
#include "eval/sandbox.h"

#include <fcntl.h>
#include <grp.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <thread>

#include <fmt/format.h>

namespace qs::eval {

namespace {

constexpr uid_t kNobody = 65534;
constexpr size_t kTailBytes = 8192;

// What a child writes to the error pipe when a setup step fails.
struct SetupError {
    int err = 0;
    char what[56] = {};
};

[[noreturn]] void die(int fd, const char* what) {
    SetupError e;
    e.err = errno;
    size_t n = std::min(sizeof(e.what) - 1, std::strlen(what));
    std::memcpy(e.what, what, n);
    ssize_t ignored = ::write(fd, &e, sizeof(e));
    (void)ignored;
    _exit(127);
}

bool write_all(const char* path, const char* text) {
    int fd = ::open(path, O_WRONLY | O_CLOEXEC);
    if (fd < 0) return false;
    size_t n = std::strlen(text);
    bool ok = ::write(fd, text, n) == ssize_t(n);
    ::close(fd);
    return ok;
}

void set_limit(int resource, rlim_t value, int err_fd, const char* what) {
    rlimit rl{value, value};
    if (::setrlimit(resource, &rl) != 0) die(err_fd, what);
}

struct Prepared {
    std::vector<char*> argv, envp;
    std::string work_dir, out_path, err_path, uid_map, gid_map;
    SandboxLimits limits;
    bool root = false;
    int err_fd = -1, status_fd = -1;
};

// C: the program.
[[noreturn]] void program_main(const Prepared& p) {
    if (::chdir(p.work_dir.c_str()) != 0) die(p.err_fd, "chdir to the work dir");
    const SandboxLimits& l = p.limits;
    rlimit cpu{rlim_t(l.cpu_s), rlim_t(l.cpu_s + 1)};  // SIGXCPU at the soft limit, then SIGKILL
    if (::setrlimit(RLIMIT_CPU, &cpu) != 0) die(p.err_fd, "setrlimit CPU");
    set_limit(RLIMIT_AS, rlim_t(l.memory_bytes), p.err_fd, "setrlimit AS");
    set_limit(RLIMIT_FSIZE, rlim_t(l.file_bytes), p.err_fd, "setrlimit FSIZE");
    set_limit(RLIMIT_NOFILE, rlim_t(l.open_files), p.err_fd, "setrlimit NOFILE");
    set_limit(RLIMIT_CORE, 0, p.err_fd, "setrlimit CORE");
    if (p.root) {
        // nobody's processes are few; this stops a fork bomb from exhausting the PID space.
        set_limit(RLIMIT_NPROC, 512, p.err_fd, "setrlimit NPROC");
        if (::setgroups(0, nullptr) != 0) die(p.err_fd, "setgroups");
        if (::setgid(kNobody) != 0) die(p.err_fd, "setgid nobody");
        if (::setuid(kNobody) != 0) die(p.err_fd, "setuid nobody");
    }
    ::execve(p.argv[0], p.argv.data(), p.envp.data());
    die(p.err_fd, "exec");
}

// B: pid 1 of the namespace.
[[noreturn]] void init_main(const Prepared& p) {
    pid_t c = ::fork();
    if (c < 0) die(p.err_fd, "fork (program)");
    if (c == 0) program_main(p);
    int status = 0;
    for (;;) {
        int st = 0;
        pid_t w = ::waitpid(-1, &st, 0);
        if (w == c) {
            status = st;
            break;
        }
        if (w < 0 && errno != EINTR) break;
    }
    ssize_t ignored = ::write(p.status_fd, &status, sizeof(status));
    (void)ignored;
    _exit(0);
}

// A: namespaces, then waits for B.
[[noreturn]] void outer_main(const Prepared& p, pid_t parent) {
    ::setsid();
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) _exit(1);
    int in = ::open("/dev/null", O_RDONLY);
    int out = ::open(p.out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    int err = ::open(p.err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (in < 0 || out < 0 || err < 0) die(p.err_fd, "open stdio files");
    if (::dup2(in, 0) < 0 || ::dup2(out, 1) < 0 || ::dup2(err, 2) < 0) die(p.err_fd, "dup2");
    ::close(in), ::close(out), ::close(err);
    if (p.limits.isolate_network) {
        int flags = CLONE_NEWNET | CLONE_NEWPID | (p.root ? 0 : CLONE_NEWUSER);
        if (::unshare(flags) != 0) die(p.err_fd, "unshare (network/PID namespaces)");
        if (!p.root) {
            if (!write_all("/proc/self/setgroups", "deny")) die(p.err_fd, "write setgroups");
            if (!write_all("/proc/self/uid_map", p.uid_map.c_str())) die(p.err_fd, "uid_map");
            if (!write_all("/proc/self/gid_map", p.gid_map.c_str())) die(p.err_fd, "gid_map");
        }
    }
    pid_t b = ::fork();
    if (b < 0) die(p.err_fd, "fork (init)");
    if (b == 0) init_main(p);
    int st = 0;
    while (::waitpid(b, &st, 0) < 0 && errno == EINTR) {
    }
    _exit(WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st));
}

std::string file_tail(const std::string& path) {
    std::ifstream f(path, std::ios::binary | std::ios::ate);
    if (!f) return "";
    std::streamoff size = f.tellg();
    std::streamoff start =
        size > std::streamoff(kTailBytes) ? size - std::streamoff(kTailBytes) : 0;
    f.seekg(start);
    std::string s(size_t(size - start), '\0');
    f.read(s.data(), std::streamsize(s.size()));
    return s;
}

}  // namespace

std::string signal_name(int sig) {
    switch (sig) {
        case SIGKILL:
            return "SIGKILL";
        case SIGXCPU:
            return "SIGXCPU";
        case SIGXFSZ:
            return "SIGXFSZ";
        case SIGSEGV:
            return "SIGSEGV";
        case SIGABRT:
            return "SIGABRT";
        case SIGBUS:
            return "SIGBUS";
        case SIGTERM:
            return "SIGTERM";
        case SIGFPE:
            return "SIGFPE";
        case SIGILL:
            return "SIGILL";
        case SIGPIPE:
            return "SIGPIPE";
    }
    return fmt::format("signal {}", sig);
}

std::string SandboxRun::describe() const {
    switch (end) {
        case End::kExited:
            return fmt::format("exit {}", exit_code);
        case End::kSignaled:
            return "killed by " + signal_name(signal);
        case End::kWallTimeout:
            return fmt::format("wall timeout after {:.1f} s", wall_s);
    }
    return "?";
}

Result<SandboxRun> run_sandboxed(const std::vector<std::string>& argv, const std::string& work_dir,
                                 const SandboxLimits& limits) {
    if (argv.empty() || argv[0].empty() || argv[0][0] != '/')
        return invalid_argument("sandbox: the program must be an absolute path");
    Prepared p;
    p.limits = limits;
    p.root = ::geteuid() == 0;
    p.work_dir = work_dir;
    p.out_path = work_dir + "/stdout.txt";
    p.err_path = work_dir + "/stderr.txt";
    p.uid_map = fmt::format("{0} {0} 1\n", ::geteuid());
    p.gid_map = fmt::format("{0} {0} 1\n", ::getegid());
    std::vector<std::string> args = argv;
    for (auto& a : args) p.argv.push_back(a.data());
    p.argv.push_back(nullptr);
    std::vector<std::string> env = {
        "PATH=/usr/local/bin:/usr/bin:/bin", "HOME=" + work_dir, "LANG=C.UTF-8",
        "PYTHONDONTWRITEBYTECODE=1",         "PYTHONHASHSEED=0", "TMPDIR=" + work_dir};
    for (auto& e : env) p.envp.push_back(e.data());
    p.envp.push_back(nullptr);
    if (p.root && ::chown(work_dir.c_str(), kNobody, kNobody) != 0)
        return io_error(fmt::format("sandbox: chown {}: {}", work_dir, std::strerror(errno)));

    int err_pipe[2], status_pipe[2];
    if (::pipe2(err_pipe, O_CLOEXEC) != 0) return io_error("sandbox: pipe");
    if (::pipe2(status_pipe, O_CLOEXEC) != 0) {
        ::close(err_pipe[0]), ::close(err_pipe[1]);
        return io_error("sandbox: pipe");
    }
    p.err_fd = err_pipe[1];
    p.status_fd = status_pipe[1];
    const auto t0 = std::chrono::steady_clock::now();
    const pid_t parent = ::getpid();
    pid_t a = ::fork();
    if (a == 0) outer_main(p, parent);
    ::close(err_pipe[1]);
    ::close(status_pipe[1]);
    if (a < 0) {
        ::close(err_pipe[0]), ::close(status_pipe[0]);
        return io_error(fmt::format("sandbox: fork: {}", std::strerror(errno)));
    }

    SandboxRun run;
    int st = 0;
    rusage ru{};
    bool timed_out = false;
    auto elapsed = [&] {
        return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    };
    for (int sleep_us = 200;;) {
        pid_t w = ::wait4(a, &st, WNOHANG, &ru);
        if (w == a) break;
        if (w < 0 && errno != EINTR) break;
        if (!timed_out && elapsed() > limits.wall_s) {
            timed_out = true;
            ::kill(-a, SIGKILL);  // A's process group: A, B, C (B's death ends the namespace)
            ::kill(a, SIGKILL);
        }
        std::this_thread::sleep_for(std::chrono::microseconds(sleep_us));
        sleep_us = std::min(sleep_us * 2, 10000);
    }
    run.wall_s = elapsed();
    run.cpu_s = double(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
                double(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) * 1e-6;

    // Nothing else writes these pipes once A is gone; read without blocking all the same.
    ::fcntl(err_pipe[0], F_SETFL, O_NONBLOCK);
    ::fcntl(status_pipe[0], F_SETFL, O_NONBLOCK);
    SetupError setup;
    ssize_t n_err = ::read(err_pipe[0], &setup, sizeof(setup));
    int program_status = 0;
    ssize_t n_status = ::read(status_pipe[0], &program_status, sizeof(program_status));
    ::close(err_pipe[0]);
    ::close(status_pipe[0]);
    if (n_err == ssize_t(sizeof(setup))) {
        setup.what[sizeof(setup.what) - 1] = '\0';
        return io_error(
            fmt::format("sandbox setup failed: {}: {}", setup.what, std::strerror(setup.err)));
    }
    run.stdout_tail = file_tail(p.out_path);
    run.stderr_tail = file_tail(p.err_path);
    if (timed_out) {
        run.end = SandboxRun::End::kWallTimeout;
        return run;
    }
    if (n_status != ssize_t(sizeof(program_status)))
        return internal_error("sandbox: the init process ended without reporting (" +
                              std::string(WIFSIGNALED(st)
                                              ? signal_name(WTERMSIG(st))
                                              : fmt::format("exit {}", WEXITSTATUS(st))) +
                              ")");
    if (WIFSIGNALED(program_status)) {
        run.end = SandboxRun::End::kSignaled;
        run.signal = WTERMSIG(program_status);
    } else {
        run.exit_code = WEXITSTATUS(program_status);
    }
    return run;
}

Status check_sandbox_available() {
    std::error_code ec;
    auto base = std::filesystem::temp_directory_path(ec);
    if (ec) base = "/tmp";
    std::string tmpl = (base / "qs_sandbox_probe_XXXXXX").string();
    if (!::mkdtemp(tmpl.data())) return io_error("cannot create a temporary directory");
    SandboxLimits l;
    l.wall_s = 10;
    auto r = run_sandboxed({"/bin/true"}, tmpl, l);
    std::filesystem::remove_all(tmpl, ec);
    if (!r.is_ok()) return r.status();
    if (r->end != SandboxRun::End::kExited || r->exit_code != 0)
        return io_error("sandbox probe /bin/true ended with " + r->describe());
    return Status::ok();
}

}  // namespace qs::eval

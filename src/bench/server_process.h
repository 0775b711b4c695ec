// A `qwenserve serve` child process for `campaign sweep`: started with fork + exec in its own
// process group, stdout and stderr appended to a log file, stdin from /dev/null; polled for
// /health; stopped with SIGTERM and, after a timeout, SIGKILL.
// No orphans: the child asks the kernel for SIGTERM when its parent dies (PR_SET_PDEATHSIG, so
// even a SIGKILLed sweep takes its server down), and install_interrupt_handlers() makes SIGINT,
// SIGTERM and SIGHUP to the sweep forward SIGTERM to the running child at once (a second one:
// SIGKILL) and set interrupted(), which the sweep polls to stop. One child at a time; every
// function here is called from the sweep's main thread (the handlers run on any thread).
#pragma once

#include <sys/types.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/status.h"

namespace qs::bench {

class ServerProcess {
   public:
    // argv[0] is the program path. Errors: the log cannot be opened, fork fails (an exec
    // failure shows as exit code 127 with the reason in the log).
    static Result<std::unique_ptr<ServerProcess>> spawn(const std::vector<std::string>& argv,
                                                        const std::string& log_path);
    ~ServerProcess();  // stop(10) if still running: a child never outlives its object

    ServerProcess(const ServerProcess&) = delete;
    ServerProcess& operator=(const ServerProcess&) = delete;

    pid_t pid() const { return pid_; }
    bool running();                        // reaps the child if it has exited (waitpid WNOHANG)
    std::string exit_description() const;  // "exit code 2", "killed by signal 9", "running"

    struct StopResult {
        bool graceful = false;  // exited by itself after SIGTERM (not SIGKILLed)
        double seconds = 0;     // from SIGTERM to exit
        std::string how;        // "exited (exit code 0) 0.21 s after SIGTERM", ...
    };
    // SIGTERM, then waits up to timeout_s for the exit; SIGKILL after that.
    StopResult stop(double timeout_s);

   private:
    explicit ServerProcess(pid_t pid) : pid_(pid) {}
    void reaped(int status);

    pid_t pid_;
    bool exited_ = false;
    int status_ = 0;  // waitpid status once exited_
};

enum class HealthWait { kHealthy, kExited, kTimeout, kInterrupted };
// Polls GET /health on 127.0.0.1:port every 100 ms until it answers 200 (kHealthy), the
// process exits, interrupted() turns true, or timeout_s passes.
HealthWait wait_healthy(ServerProcess& process, int port, double timeout_s);

// HTTP status of GET path on 127.0.0.1:port; 0 when there was no answer within timeout_s.
int http_get_status(int port, const std::string& path, double timeout_s);

// A loopback TCP port that was free a moment ago (bind to port 0, read it, close).
Result<int> pick_free_port();

// The last `n` non-empty lines of a text file joined with " | " (failure reasons quote the
// server's own last words; the sweep's "# campaign sweep" header line is skipped); at most
// max_bytes, cut from the front.
std::string log_tail(const std::string& path, int n, size_t max_bytes = 400);

void install_interrupt_handlers();
bool interrupted();

}  // namespace qs::bench

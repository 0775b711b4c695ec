// Runs an untrusted program (model-written code and its tests) in a sandbox: a separate process
// tree with
//   - no network: its own network namespace (only a loopback that is down), so every connect,
//     even to 127.0.0.1, fails with ENETUNREACH;
//   - its own PID namespace: a small init process (pid 1) runs the program as pid 2, and when
//     init ends the kernel kills everything left in the namespace (no escaped forks);
//   - setrlimit: CPU seconds (SIGXCPU, SIGKILL a second later), address space (allocations fail:
//     Python raises MemoryError), file size (writes past it fail with EFBIG; Python ignores
//     SIGXFSZ), open files, no core dumps;
//   - a wall-clock limit: after it the whole process group is SIGKILLed;
//   - a fresh working directory; when the caller is root, the program runs as nobody (65534),
//     so it cannot raise its limits or write outside world-writable places; otherwise a user
//     namespace maps the caller's own uid (the limits cannot be raised either: that needs
//     CAP_SYS_RESOURCE in the initial namespace).
// Not isolated: the file system is readable as that user (no mount namespace). stdout and stderr
// go to files in the working directory and count against the file-size limit.
// Thread-safe: several threads may run sandboxes at once (fork with only async-signal-safe calls
// before exec).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"

namespace qs::eval {

struct SandboxLimits {
    double wall_s = 30;                       // whole tree SIGKILLed after this
    int64_t cpu_s = 20;                       // RLIMIT_CPU of the program
    int64_t memory_bytes = int64_t(2) << 30;  // RLIMIT_AS
    int64_t file_bytes = int64_t(16) << 20;   // RLIMIT_FSIZE
    int64_t open_files = 256;                 // RLIMIT_NOFILE
    bool isolate_network = true;              // false only for tests and --no-network-isolation
};

struct SandboxRun {
    enum class End { kExited, kSignaled, kWallTimeout };
    End end = End::kExited;
    int exit_code = 0;  // kExited
    int signal = 0;     // kSignaled: the signal that ended the program
    double wall_s = 0;
    double cpu_s = 0;                      // user + system of the whole tree
    std::string stdout_tail, stderr_tail;  // last 8 KiB of each
    std::string describe() const;          // "exit 0", "signal 24 (SIGXCPU)", "wall timeout"
};

// Runs argv (argv[0] an absolute path) in work_dir, which must exist and be empty but for the
// program's inputs (it gets chowned to nobody when the caller is root). Errors: the sandbox
// could not be set up (fork, namespaces, uid maps, exec), with the reason.
Result<SandboxRun> run_sandboxed(const std::vector<std::string>& argv, const std::string& work_dir,
                                 const SandboxLimits& limits);

// Whether namespaces work here: runs /bin/true in a sandbox. The message says what failed.
Status check_sandbox_available();

// Name of a signal ("SIGKILL"), or "signal N".
std::string signal_name(int sig);

}  // namespace qs::eval

// Executes a candidate solution with its tests in the sandbox (eval/sandbox.h) and classifies the
// outcome (`eval code`). The work directory gets solution.py (the extracted code), test_code.py
// (the problem's tests) and harness.py, and the sandbox runs `python3 -I harness.py ENTRY`. The
// harness runs the solution and then the tests in one namespace (as HumanEval and BigCodeBench
// do) and supports three test styles: a `check(candidate)` function (called with the entry
// point), unittest.TestCase classes (run in definition order), or bare top-level asserts. It writes
// its verdict to qs_result.json. Error classes, first match wins:
//   timeout           the wall-clock limit ended it
//   cpu_limit         killed by SIGXCPU/SIGKILL at the CPU limit
//   file_size_limit   a write past the file-size limit (EFBIG, or SIGXFSZ)
//   memory_limit      MemoryError (allocation past the address-space limit)
//   syntax_error      the solution does not compile
//   missing_entry_point  the solution does not define the entry point
//   assertion_failed  a test assertion failed (wrong answer)
//   runtime_error:<ExceptionName>  an exception in the solution or tests (OSError for a blocked
//                     network connection: errno 101, "Network is unreachable")
//   crash:<SIGNAL>    killed by another signal; exit:<code> ended without a verdict (os._exit)
//   pass              every test ran and passed
// Thread-safe (one work directory per call).
#pragma once

#include <string>

#include "core/status.h"
#include "eval/sandbox.h"

namespace qs::eval {

struct ExecOptions {
    std::string python = "/usr/bin/python3";  // absolute; readable by nobody when run as root
    std::string work_root;                    // parent of the per-run directories; empty: $TMPDIR
    SandboxLimits limits;
    bool keep_work_dir = false;  // debugging: leave the directory (its path is in the result)
};

struct ExecResult {
    bool passed = false;
    std::string error_class;  // "pass" or a class above
    std::string message;      // the exception text, the signal, the tail of stderr
    double wall_s = 0, cpu_s = 0;
    std::string work_dir;  // only kept with keep_work_dir
};

// Errors only when the sandbox cannot be set up (the caller should stop: nothing can be judged).
Result<ExecResult> execute_solution(const std::string& code, const std::string& test,
                                    const std::string& entry_point, const ExecOptions& options);

// The harness program's text (for documentation and tests).
const char* harness_source();

}  // namespace qs::eval

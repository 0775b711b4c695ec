// Solution execution and outcome classification (see code_exec.h).
#include "eval/code_exec.h"

#include <signal.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace qs::eval {

namespace {

const char* kHarness =
    R"PY(# qwenserve eval harness: runs solution.py, then test_code.py, in one namespace.
import json, sys, traceback, unittest

def verdict(cls, msg=""):
    with open("qs_result.json", "w") as f:
        json.dump({"class": cls, "message": msg[-4000:]}, f)

def classify(e):
    if isinstance(e, MemoryError):
        return "memory_limit"
    if isinstance(e, OSError) and e.errno == 27:  # EFBIG: past RLIMIT_FSIZE
        return "file_size_limit"
    if isinstance(e, AssertionError):
        return "assertion_failed"
    return "runtime_error:" + type(e).__name__

def describe(e):
    return "".join(traceback.format_exception_only(type(e), e)).strip()

class FirstProblem(unittest.TestResult):
    def __init__(self):
        super().__init__()
        self.first = None
    def addError(self, test, err):
        super().addError(test, err)
        if self.first is None:
            self.first = err[1]
    def addFailure(self, test, err):
        super().addFailure(test, err)
        if self.first is None:
            self.first = err[1]

def main():
    entry = sys.argv[1] if len(sys.argv) > 1 else ""
    with open("solution.py", encoding="utf-8", errors="replace") as f:
        src = f.read()
    with open("test_code.py", encoding="utf-8", errors="replace") as f:
        test = f.read()
    try:
        code = compile(src, "solution.py", "exec")
    except (SyntaxError, ValueError) as e:
        return verdict("syntax_error", describe(e))
    g = {"__name__": "__qs_eval__", "__builtins__": __builtins__}
    try:
        exec(code, g)
    except BaseException as e:
        return verdict(classify(e), describe(e))
    if entry and entry not in g:
        return verdict("missing_entry_point", "the solution defines no '%s'" % entry)
    before = dict(g)
    try:
        exec(compile(test, "test_code.py", "exec"), g)
        new = [v for k, v in g.items() if k not in before or before[k] is not v]
        if callable(g.get("check")) and g.get("check") is not before.get("check"):
            g["check"](g[entry] if entry else None)
        cases = [v for v in new if isinstance(v, type) and issubclass(v, unittest.TestCase)]
        if cases:
            loader = unittest.TestLoader()
            suite = unittest.TestSuite([loader.loadTestsFromTestCase(c) for c in cases])
            result = FirstProblem()
            suite.run(result)
            if result.first is not None:
                return verdict(classify(result.first), describe(result.first))
    except BaseException as e:
        return verdict(classify(e), describe(e))
    verdict("pass")

main()
)PY";

std::string write_file(const std::filesystem::path& path, const std::string& text) {
    std::ofstream f(path, std::ios::binary | std::ios::trunc);
    f << text;
    return f ? "" : "cannot write " + path.string();
}

std::string last_line(const std::string& text) {
    std::string t = text;
    while (!t.empty() && (t.back() == '\n' || t.back() == '\r')) t.pop_back();
    size_t nl = t.rfind('\n');
    return nl == std::string::npos ? t : t.substr(nl + 1);
}

}  // namespace

const char* harness_source() { return kHarness; }

Result<ExecResult> execute_solution(const std::string& code, const std::string& test,
                                    const std::string& entry_point, const ExecOptions& o) {
    namespace fs = std::filesystem;
    std::error_code ec;
    fs::path root = o.work_root.empty() ? fs::temp_directory_path(ec) : fs::path(o.work_root);
    if (ec) root = "/tmp";
    std::string tmpl = (root / "qs_eval_XXXXXX").string();
    if (!::mkdtemp(tmpl.data()))
        return io_error("cannot create a work directory under " + root.string());
    const fs::path dir = tmpl;
    for (auto [name, text] : {std::pair{"solution.py", &code}, {"test_code.py", &test}}) {
        std::string err = write_file(dir / name, *text);
        if (!err.empty()) return io_error(err);
    }
    std::string err = write_file(dir / "harness.py", kHarness);
    if (!err.empty()) return io_error(err);
    // The harness creates qs_result.json in the directory, which the sandbox chowns for root.
    auto run = run_sandboxed({o.python, "-I", "harness.py", entry_point}, dir.string(), o.limits);
    ExecResult r;
    if (!run.is_ok()) {
        fs::remove_all(dir, ec);
        return run.status();
    }
    r.wall_s = run->wall_s;
    r.cpu_s = run->cpu_s;
    nlohmann::json verdict;
    {
        std::ifstream f(dir / "qs_result.json");
        if (f) verdict = nlohmann::json::parse(f, nullptr, false);
    }
    const bool has_verdict =
        verdict.is_object() && verdict.contains("class") && verdict["class"].is_string();
    const std::string stderr_last = last_line(run->stderr_tail);
    using End = SandboxRun::End;
    if (run->end == End::kWallTimeout) {
        r.error_class = "timeout";
        r.message = run->describe();
    } else if (run->end == End::kSignaled &&
               (run->signal == SIGXCPU ||
                (run->signal == SIGKILL && run->cpu_s >= double(o.limits.cpu_s)))) {
        r.error_class = "cpu_limit";
        r.message = fmt::format("{} after {:.1f} s of CPU", run->describe(), run->cpu_s);
    } else if (run->end == End::kSignaled && run->signal == SIGXFSZ) {
        r.error_class = "file_size_limit";
        r.message = run->describe();
    } else if (has_verdict) {
        r.error_class = verdict["class"].get<std::string>();
        r.message = verdict.value("message", "");
    } else if (run->stderr_tail.find("MemoryError") != std::string::npos) {
        r.error_class = "memory_limit";
        r.message = stderr_last;
    } else if (run->end == End::kSignaled) {
        r.error_class = "crash:" + signal_name(run->signal);
        r.message = run->describe() + (stderr_last.empty() ? "" : ": " + stderr_last);
    } else {
        r.error_class = fmt::format("exit:{}", run->exit_code);
        r.message = "ended without a verdict" + (stderr_last.empty() ? "" : ": " + stderr_last);
    }
    if (r.error_class == "pass" && run->end == End::kExited && run->exit_code != 0) {
        r.error_class = fmt::format("exit:{}", run->exit_code);
        r.message = "a verdict of pass but exit code " + std::to_string(run->exit_code);
    }
    r.passed = r.error_class == "pass";
    if (o.keep_work_dir)
        r.work_dir = dir.string();
    else
        fs::remove_all(dir, ec);
    return r;
}

}  // namespace qs::eval

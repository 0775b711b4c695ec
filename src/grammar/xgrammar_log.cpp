// The log hooks xgrammar calls (it is built with XGRAMMAR_LOG_CUSTOMIZE=1): fatal errors throw,
// as xgrammar's own default does, and are caught at src/grammar's boundary; warnings go to the
// thread's XgrammarWarningCapture when one is alive (the compiler turns them into errors),
// else to the log. Any thread.
#include <stdexcept>
#include <string>

#include "core/log.h"
#include "grammar/xgrammar_bridge.h"

namespace qs::grammar {

namespace {
thread_local std::vector<std::string>* t_capture = nullptr;
constexpr int kXgrammarWarning = 2;  // XGRAMMAR_LOG_LEVEL_WARNING
}  // namespace

XgrammarWarningCapture::XgrammarWarningCapture() { t_capture = &warnings_; }
XgrammarWarningCapture::~XgrammarWarningCapture() { t_capture = nullptr; }

}  // namespace qs::grammar

namespace xgrammar {

[[noreturn]] void LogFatalImpl(const std::string& file, int lineno, const std::string& message) {
    (void)file;
    (void)lineno;
    throw std::runtime_error(message);
}

void LogMessageImpl(const std::string& file, int lineno, int level, const std::string& message) {
    if (level == qs::grammar::kXgrammarWarning && qs::grammar::t_capture) {
        qs::grammar::t_capture->push_back(message);
        return;
    }
    if (level >= qs::grammar::kXgrammarWarning) qs::log_warn("xgrammar {}:{}: {}", file, lineno, message);
    else qs::log_info("xgrammar {}:{}: {}", file, lineno, message);
}

}  // namespace xgrammar

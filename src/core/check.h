// QS_CHECK: always-on invariant checks for conditions that only a bug can break.
// Anything a user or a file can cause goes through Status/Result instead (core/status.h).
#pragma once

#include <cstdio>
#include <cstdlib>

namespace qs::detail {
[[noreturn]] inline void check_failed(const char* file, int line, const char* expr, const char* msg) {
    std::fprintf(stderr, "qwenserve: internal error at %s:%d: check failed: %s%s%s\n", file, line,
                 expr, msg[0] ? ": " : "", msg);
    std::fflush(stderr);
    std::abort();
}
}  // namespace qs::detail

#define QS_CHECK(cond)                                                  \
    do {                                                                \
        if (!(cond)) ::qs::detail::check_failed(__FILE__, __LINE__, #cond, ""); \
    } while (0)

#define QS_CHECK_MSG(cond, msg)                                            \
    do {                                                                   \
        if (!(cond)) ::qs::detail::check_failed(__FILE__, __LINE__, #cond, (msg)); \
    } while (0)

// Logging sink: timestamped lines on stderr.
#include "core/log.h"

#include <atomic>
#include <chrono>
#include <cstdio>
#include <ctime>

namespace qs {

namespace {
std::atomic<int> g_level{int(LogLevel::kInfo)};
}

void set_log_level(LogLevel level) { g_level = int(level); }
LogLevel log_level() { return LogLevel(g_level.load()); }

void log_line(LogLevel level, std::string_view text) {
    static const char* kNames[] = {"debug", "info", "warn", "error"};
    auto now = std::chrono::system_clock::now();
    std::time_t t = std::chrono::system_clock::to_time_t(now);
    auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count() % 1000;
    std::tm tm{};
    gmtime_r(&t, &tm);
    char stamp[32];
    std::strftime(stamp, sizeof stamp, "%H:%M:%S", &tm);
    std::string line = fmt::format("[{}.{:03d} {}] {}\n", stamp, int(ms), kNames[int(level)], text);
    std::fwrite(line.data(), 1, line.size(), stderr);
}

}  // namespace qs

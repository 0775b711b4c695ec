// Logging sink: timestamped text or JSON lines on stderr (see log.h and log_format.h).
#include "core/log.h"

#include <nlohmann/json.hpp>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <ctime>

#include "core/log_format.h"

namespace qs {

namespace {
std::atomic<int> g_level{int(LogLevel::kInfo)};
std::atomic<int> g_format{int(LogFormat::kText)};
constexpr const char* kNames[] = {"debug", "info", "warn", "error"};

// "12:00:00.123" (text) or "2026-12-01T12:00:00.123Z" (JSON), UTC.
std::string timestamp(bool iso) {
    auto now = std::chrono::system_clock::now();
    std::time_t t = std::chrono::system_clock::to_time_t(now);
    auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count() % 1000;
    std::tm tm{};
    gmtime_r(&t, &tm);
    char stamp[32];
    std::strftime(stamp, sizeof stamp, iso ? "%Y-%m-%dT%H:%M:%S" : "%H:%M:%S", &tm);
    return fmt::format("{}.{:03d}{}", stamp, int(ms), iso ? "Z" : "");
}

std::string json_string(const std::string& s) {
    return nlohmann::json(s).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}
}  // namespace

void set_log_level(LogLevel level) { g_level = int(level); }
LogLevel log_level() { return LogLevel(g_level.load()); }
void set_log_format(LogFormat format) { g_format = int(format); }
LogFormat log_format() { return LogFormat(g_format.load()); }

Result<LogLevel> parse_log_level(std::string_view name) {
    if (name == "debug") return LogLevel::kDebug;
    if (name == "info") return LogLevel::kInfo;
    if (name == "warn" || name == "warning") return LogLevel::kWarn;
    if (name == "error") return LogLevel::kError;
    return invalid_argument(fmt::format("--log-level must be 'error', 'warn', 'info' or 'debug', got '{}'", name));
}

Result<LogFormat> parse_log_format(std::string_view name) {
    if (name == "text") return LogFormat::kText;
    if (name == "json") return LogFormat::kJson;
    return invalid_argument(fmt::format("--log-format must be 'text' or 'json', got '{}'", name));
}

LogField log_field(std::string key, std::string value) { return {std::move(key), std::move(value), false}; }
LogField log_field_int(std::string key, int64_t value) { return {std::move(key), std::to_string(value), true}; }
LogField log_field_real(std::string key, double value) { return {std::move(key), fmt::format("{:.4f}", value), true}; }

std::string format_log_line(LogLevel level, std::string_view text, const std::vector<LogField>& fields) {
    if (log_format() == LogFormat::kJson) {
        std::string line = fmt::format(R"({{"time":"{}","level":"{}","msg":{})", timestamp(true), kNames[int(level)],
                                       json_string(std::string(text)));
        for (const auto& f : fields)
            line += "," + json_string(f.key) + ":" + (f.is_number ? f.value : json_string(f.value));
        return line + "}";
    }
    std::string line = fmt::format("[{} {}] {}", timestamp(false), kNames[int(level)], text);
    for (const auto& f : fields) {
        const bool quote = !f.is_number && (f.value.empty() || f.value.find_first_of(" \"=\n") != std::string::npos);
        line += " " + f.key + "=" + (quote ? json_string(f.value) : f.value);
    }
    return line;
}

void log_line(LogLevel level, std::string_view text) { log_fields(level, text, {}); }

void log_fields(LogLevel level, std::string_view text, const std::vector<LogField>& fields) {
    if (level < log_level()) return;
    const std::string line = format_log_line(level, text, fields) + "\n";
    std::fwrite(line.data(), 1, line.size(), stderr);
}

}  // namespace qs

// The log's format and structured lines (core/log.h writes the lines). Two formats, chosen once
// at start (--log-format): text ("[12:00:00.123 info] message key=value") and JSON lines
// ({"time": ..., "level": ..., "msg": ..., "key": value}). Structured lines (log_fields: the
// request log) carry key/value fields. Thread-safe like log.h.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/log.h"
#include "core/status.h"

namespace qs {

enum class LogFormat { kText = 0, kJson = 1 };

void set_log_format(LogFormat format);
LogFormat log_format();
// "error", "warn", "info", "debug" (also "warning"); the message lists them.
Result<LogLevel> parse_log_level(std::string_view name);
// "text", "json".
Result<LogFormat> parse_log_format(std::string_view name);

// One field of a structured line. A number is written bare in JSON; text is quoted.
struct LogField {
    std::string key;
    std::string value;
    bool is_number = false;
};
LogField log_field(std::string key, std::string value);
LogField log_field_int(std::string key, int64_t value);
LogField log_field_real(std::string key, double value);  // 4 decimals

// Writes the line if `level` passes the log level.
void log_fields(LogLevel level, std::string_view text, const std::vector<LogField>& fields);
// The line log_line/log_fields write, without the trailing newline.
std::string format_log_line(LogLevel level, std::string_view text, const std::vector<LogField>& fields);

}  // namespace qs

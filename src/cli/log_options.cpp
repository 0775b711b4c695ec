// The logging options of every command (see log_options.h).
#include "cli/log_options.h"

#include "core/log_format.h"

namespace qs::cli {

const OptionGroup& log_options() {
    static const OptionGroup g = {
        "Logging",
        {choice("log-level", {"error", "warn", "info", "debug"}, "lines below this level are not written", "info"),
         choice("log-format", {"text", "json"},
                "text: '[12:00:00.123 info] message key=value'; json: one JSON object a line with time, level, "
                "msg and the line's fields",
                "text")}};
    return g;
}

Status apply_log_options(const Args& args) {
    QS_ASSIGN_OR_RETURN(LogLevel level, parse_log_level(args.get_or("log-level", "info")));
    QS_ASSIGN_OR_RETURN(LogFormat format, parse_log_format(args.get_or("log-format", "text")));
    set_log_level(level);
    set_log_format(format);
    return Status::ok();
}

}  // namespace qs::cli

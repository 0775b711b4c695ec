// The logging options every command takes: --log-level error|warn|info|debug and
// --log-format text|json (core/log.h). parse_command applies them before the command runs.
#pragma once

#include "cli/option_table.h"
#include "core/status.h"

namespace qs::cli {

const OptionGroup& log_options();
// Sets the process's log level and format from the parsed options (or their QS_* variables).
Status apply_log_options(const Args& args);

}  // namespace qs::cli

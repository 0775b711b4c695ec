// A command's option table: every option it accepts, declared once with its value placeholder,
// default, allowed values and help. From the table the command parses its arguments (core/Args,
// with the QS_* environment variable of each option as fallback), checks required options and
// choices, and prints `--help` (each option with its default and environment variable).
// Every command also takes the logging options (--log-level, --log-format, cli/log_options.h),
// applied by parse_command. Tables are built once and immutable; main thread.
#pragma once

#include <optional>
#include <set>
#include <string>
#include <vector>

#include "core/args.h"

namespace qs::cli {

struct CliOption {
    std::string name;          // without "--": "max-num-seqs"
    std::string metavar;       // the value's placeholder ("N", "DIR"); empty: a flag without value
    std::string help;          // one sentence or a few; wrapped by the help printer
    std::string default_text;  // shown as "default: ..."; empty: none (a flag, or no default)
    bool required = false;     // parse_command refuses the command without it
    std::vector<std::string> choices;  // when not empty: the accepted values (checked by parse_command)
    std::string allowed;       // the values allowed, in words (">= 1"), for the help; checked by the command
    bool repeatable = false;   // parsed by the command itself (campaign sweep's --grid)
    std::string short_name;    // also accepted as -short_name (vLLM's "-tp"); empty: none

    bool is_flag() const { return metavar.empty(); }
};

struct OptionGroup {
    std::string title;  // "Model", "Engine", ...
    std::vector<CliOption> options;
};

struct CommandSpec {
    std::string name;     // "serve", "campaign sweep"
    std::string summary;  // one line, for `qwenserve --help`
    std::string usage;    // after "usage: qwenserve ": "serve --model DIR|ORG/NAME [options]"
    std::string description;  // paragraphs printed after the usage line; may be empty
    std::vector<OptionGroup> groups;
    std::vector<std::string> subcommands;  // full names ("campaign sweep") listed by the help
    bool takes_positional = false;          // else a stray word is an error
};

// Shorthands for building tables.
CliOption flag(std::string name, std::string help);
CliOption valued(std::string name, std::string metavar, std::string help, std::string default_text = "");
CliOption required(std::string name, std::string metavar, std::string help);
CliOption choice(std::string name, std::vector<std::string> choices, std::string help, std::string default_text);

// The names of a group's flags and valued options, for tools that call Args::parse themselves
// (bench/gpu_forward_bench).
void add_option_names(const OptionGroup& group, std::set<std::string>& flags, std::set<std::string>& valued);

// Every option of the command, the logging options included, in help order.
std::vector<const CliOption*> all_options(const CommandSpec& spec);
// `qwenserve <cmd> --help`: usage, description, then each group's options.
std::string format_help(const CommandSpec& spec);

// True when argv asks for help: "--help" or "-h" in an option position (not as an option's
// value, not after "--").
bool wants_help(const CommandSpec& spec, int argc, char** argv);

// Parses argv by the table: --help / -h prints the help on stdout (exit 0); an unknown option,
// a missing value or required option, or a value outside `choices` prints one line naming it
// and how to get help on stderr (exit 2). Applies --log-level and --log-format. Returns the
// arguments, or nothing with `exit_code` set when the command is over.
std::optional<Args> parse_command(const CommandSpec& spec, int argc, char** argv, int& exit_code);

}  // namespace qs::cli

// The subcommands of the qwenserve binary. Each takes the arguments after its name and returns
// the process exit code; errors are printed as one line naming the problem. Each has an option
// table (cli/option_table.h) that parses its arguments and prints its --help.
#pragma once

#include <string>

#include "cli/option_table.h"
#include "core/status.h"

namespace qs::cli {

struct Command {
    int (*run)(int argc, char** argv);
    const CommandSpec& (*spec)();
};

// A top-level subcommand ("serve"); nullptr if there is none.
const Command* find_command(const std::string& name);
// The table of a command or subcommand by its full name ("serve", "campaign sweep"); nullptr
// if there is none.
const CommandSpec* find_spec(const std::string& full_name);
// `qwenserve --help`: the commands with their summaries.
std::string format_usage();
// `qwenserve --version`: version and build (git hash, CUDA on/off and architecture).
std::string format_version();

// Prints "qwenserve <command>: <message>" to stderr and returns the exit code for the status.
int fail(const char* command, const Status& status);

// Subcommand entry points and option tables, one file each.
int run_logits(int argc, char** argv);
const CommandSpec& logits_spec();
int run_generate(int argc, char** argv);
const CommandSpec& generate_spec();
int run_capacity(int argc, char** argv);
const CommandSpec& capacity_spec();
int run_serve(int argc, char** argv);
const CommandSpec& serve_spec();
int run_tokenize(int argc, char** argv);
const CommandSpec& tokenize_spec();
int run_bench(int argc, char** argv);
const CommandSpec& bench_spec();
const CommandSpec& bench_fixture_spec();
int run_campaign(int argc, char** argv);
const CommandSpec& campaign_spec();
const CommandSpec& campaign_record_spec();
const CommandSpec& campaign_compare_spec();
int run_campaign_sweep(int argc, char** argv);   // `campaign sweep` (campaign_sweep.cpp)
const CommandSpec& campaign_sweep_spec();
int run_campaign_report(int argc, char** argv);  // `campaign report` (campaign_report_cmd.cpp)
const CommandSpec& campaign_report_spec();
int run_quantize(int argc, char** argv);
const CommandSpec& quantize_spec();
int run_eval(int argc, char** argv);          // `eval code`, `eval problems` (eval_cmd.cpp)
const CommandSpec& eval_spec();               // the option tables: eval_specs.cpp
const CommandSpec& eval_code_spec();
const CommandSpec& eval_problems_spec();
int run_eval_compare(int argc, char** argv);  // `eval compare` (eval_compare_cmd.cpp)
const CommandSpec& eval_compare_spec();
int run_eval_power(int argc, char** argv);    // `eval power` (eval_compare_cmd.cpp)
const CommandSpec& eval_power_spec();
int run_eval_niah(int argc, char** argv);     // `eval niah` (eval_niah_cmd.cpp)
const CommandSpec& eval_niah_spec();

}  // namespace qs::cli

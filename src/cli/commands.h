// The subcommands of the qwenserve binary. Each takes the arguments after its name and returns
// the process exit code; errors are printed as one line naming the problem.
#pragma once

#include <string>

#include "core/status.h"

namespace qs::cli {

struct Command {
    const char* name;
    const char* summary;
    int (*run)(int argc, char** argv);
};

// Looks a subcommand up in the table (commands.cpp); nullptr if there is none.
const Command* find_command(const std::string& name);
void print_usage();

// Prints "qwenserve <command>: <message>" to stderr and returns the exit code for the status.
int fail(const char* command, const Status& status);

// Subcommand entry points, one file each.
int run_logits(int argc, char** argv);
int run_generate(int argc, char** argv);
int run_capacity(int argc, char** argv);
int run_serve(int argc, char** argv);
int run_tokenize(int argc, char** argv);
int run_bench(int argc, char** argv);
int run_campaign(int argc, char** argv);
int run_campaign_sweep(int argc, char** argv);   // `campaign sweep` (campaign_sweep.cpp)
int run_campaign_report(int argc, char** argv);  // `campaign report` (campaign_report_cmd.cpp)
int run_quantize(int argc, char** argv);

}  // namespace qs::cli

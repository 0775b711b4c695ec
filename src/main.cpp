// qwenserve: one binary, many subcommands (serve, generate, logits, tokenize, bench, ...).
#include <cstdio>
#include <string>

#include "cli/commands.h"

int main(int argc, char** argv) {
    if (argc < 2 || std::string(argv[1]) == "--help" || std::string(argv[1]) == "-h") {
        qs::cli::print_usage();
        return argc < 2 ? 2 : 0;
    }
    const qs::cli::Command* cmd = qs::cli::find_command(argv[1]);
    if (!cmd) {
        std::fprintf(stderr, "qwenserve: unknown command '%s'\n", argv[1]);
        qs::cli::print_usage();
        return 2;
    }
    return cmd->run(argc - 2, argv + 2);
}

// qwenserve: one binary, many subcommands (serve, generate, logits, tokenize, bench, ...).
// `qwenserve --help` lists them, `qwenserve help CMD` or `qwenserve CMD --help` shows one.
#include <cstdio>
#include <string>

#include "cli/commands.h"

namespace {

int print(const std::string& text, FILE* to, int code) {
    std::fwrite(text.data(), 1, text.size(), to);
    return code;
}

// `qwenserve help [CMD [SUB]]`.
int help(int argc, char** argv) {
    if (argc == 0) return print(qs::cli::format_usage(), stdout, 0);
    std::string name = argv[0];
    for (int i = 1; i < argc; ++i) name += std::string(" ") + argv[i];
    if (const qs::cli::CommandSpec* spec = qs::cli::find_spec(name)) return print(format_help(*spec), stdout, 0);
    std::fprintf(stderr, "qwenserve help: unknown command '%s'\n\n", name.c_str());
    return print(qs::cli::format_usage(), stderr, 2);
}

}  // namespace

int main(int argc, char** argv) {
    if (argc < 2) return print(qs::cli::format_usage(), stderr, 2);
    const std::string first = argv[1];
    if (first == "--help" || first == "-h") return print(qs::cli::format_usage(), stdout, 0);
    if (first == "help") return help(argc - 2, argv + 2);
    if (first == "--version" || first == "version") return print(qs::cli::format_version(), stdout, 0);
    const qs::cli::Command* cmd = qs::cli::find_command(first);
    if (!cmd) {
        std::fprintf(stderr, "qwenserve: unknown command '%s'\n\n", first.c_str());
        return print(qs::cli::format_usage(), stderr, 2);
    }
    return cmd->run(argc - 2, argv + 2);
}

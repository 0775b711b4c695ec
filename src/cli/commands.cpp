// The subcommand table, `qwenserve --help` and --version, and shared CLI error reporting.
#include "cli/commands.h"

#include <fmt/format.h>

#include <cstdio>

#include "core/build_info.h"
#include "core/log_format.h"

namespace qs::cli {

namespace {
const Command kCommands[] = {
    {run_serve, serve_spec},       {run_generate, generate_spec}, {run_logits, logits_spec},
    {run_capacity, capacity_spec}, {run_tokenize, tokenize_spec}, {run_quantize, quantize_spec},
    {run_bench, bench_spec},       {run_campaign, campaign_spec}, {run_eval, eval_spec},
};

// Subcommands: help only (their command dispatches them).
const CommandSpec& (*const kSubcommandSpecs[])() = {
    bench_fixture_spec, campaign_record_spec, campaign_compare_spec, campaign_sweep_spec, campaign_report_spec,
    eval_code_spec,     eval_problems_spec,   eval_compare_spec,     eval_power_spec,     eval_niah_spec,
};
}  // namespace

const Command* find_command(const std::string& name) {
    for (const auto& c : kCommands)
        if (name == c.spec().name) return &c;
    return nullptr;
}

const CommandSpec* find_spec(const std::string& full_name) {
    if (const Command* c = find_command(full_name)) return &c->spec();
    for (auto spec : kSubcommandSpecs)
        if (full_name == spec().name) return &spec();
    return nullptr;
}

std::string format_usage() {
    std::string out =
        "usage: qwenserve <command> [options]\n"
        "       qwenserve <command> --help     every option of a command, with its default and QS_* variable\n"
        "       qwenserve help <command>       the same\n"
        "       qwenserve --version\n\ncommands:\n";
    for (const auto& c : kCommands) {
        const CommandSpec& s = c.spec();
        out += fmt::format("  {:<10} {}\n", s.name, s.summary);
        for (const auto& sub : s.subcommands)
            if (const CommandSpec* ss = find_spec(sub)) out += fmt::format("    {:<18} {}\n", sub, ss->summary);
    }
    return out;
}

std::string format_version() {
    const BuildInfo& b = build_info();
    return fmt::format("qwenserve {}\nbuild: git {}, CUDA {}{}, {} {}\n", b.version, b.git_hash,
                       b.cuda ? "on" : "off", b.cuda ? fmt::format(" ({})", b.cuda_arch) : std::string(),
                       b.build_type, b.compiler);
}

int fail(const char* command, const Status& status) {
    // Under --log-format json the error is a log line too, so a log reader sees why it stopped.
    if (log_format() == LogFormat::kJson)
        log_fields(LogLevel::kError, status.message(), {log_field("command", std::string("qwenserve ") + command)});
    else
        std::fprintf(stderr, "qwenserve %s: %s\n", command, status.message().c_str());
    return exit_code_for(status.kind());
}

}  // namespace qs::cli

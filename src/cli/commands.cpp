// The subcommand table and shared CLI error reporting.
#include "cli/commands.h"

#include <cstdio>

namespace qs::cli {

namespace {
const Command kCommands[] = {
    {"logits", "write float32 .npy logits for a token sequence (prefill or incremental decode)", run_logits},
    {"capacity", "KV pages, state slots and max_model_len that a cache budget holds", run_capacity},
    {"generate", "greedy generation from prompt ids, or a JSONL batch through the engine (--input/--output)", run_generate},
    {"serve", "OpenAI-compatible HTTP server (chat, completions, streaming, metrics)", run_serve},
    {"bench", "load generator (closed-loop streaming replay of a fixture) and `bench fixture`", run_bench},
    {"campaign", "benchmark campaign: `campaign sweep` a knob grid, `record`, `compare` A vs B, `report` (HTML)", run_campaign},
    {"tokenize", "JSON lines: strings to token ids, or ids to text with --decode", run_tokenize},
    {"quantize", "convert a BF16/F32 checkpoint to FP8 E4M3 with 128x128 block scales (Qwen's FP8 layout)", run_quantize},
};
}  // namespace

const Command* find_command(const std::string& name) {
    for (const auto& c : kCommands)
        if (name == c.name) return &c;
    return nullptr;
}

void print_usage() {
    std::fprintf(stderr, "usage: qwenserve <command> [options]\n\ncommands:\n");
    for (const auto& c : kCommands) std::fprintf(stderr, "  %-10s %s\n", c.name, c.summary);
}

int fail(const char* command, const Status& status) {
    std::fprintf(stderr, "qwenserve %s: %s\n", command, status.message().c_str());
    return exit_code_for(status.kind());
}

}  // namespace qs::cli

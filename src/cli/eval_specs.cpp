// The option tables of `qwenserve eval` and its subcommands (cli/option_table.h): what each
// accepts, with defaults and help; the commands themselves are eval_cmd.cpp (code, problems),
// eval_compare_cmd.cpp (compare, power) and eval_niah_cmd.cpp (niah). Main thread.
#include "cli/commands.h"

namespace qs::cli {

namespace {
OptionGroup endpoint_group() {
    return {"Endpoint",
            {required("url", "URL", "the OpenAI-compatible server, http://host:port (https is not supported)"),
             valued("model", "NAME", "the model name sent in each request", "qwen3.6-35b-a3b"),
             valued("api-key", "KEY", "sent as 'Authorization: Bearer KEY'"),
             valued("timeout-s", "S", "requests still open after S seconds are cut (0: no limit)", "0")}};
}
}  // namespace

const CommandSpec& eval_spec() {
    static const CommandSpec spec = [] {
        CommandSpec c;
        c.name = "eval";
        c.summary = "quality evidence: `eval code` (sandboxed tests), `compare` (exact McNemar), `power`, `niah`";
        c.usage = "eval code|problems|compare|power|niah [options]";
        c.description =
            "docs/BENCH.md describes the problem and result formats, the sandbox, the statistics and how to prove a "
            "cheaper configuration is not worse.";
        c.subcommands = {"eval code", "eval problems", "eval compare", "eval power", "eval niah"};
        return c;
    }();
    return spec;
}

const CommandSpec& eval_code_spec() {
    static const CommandSpec spec = [] {
        CommandSpec c;
        c.name = "eval code";
        c.summary = "run code problems against an endpoint, test each reply's code in a sandbox, write results JSONL";
        c.usage = "eval code --url URL --out R.jsonl [--problems F.jsonl|builtin] [options]";
        c.description =
            "Each problem is one streamed chat request; the code in the reply (reasoning skipped) runs with the "
            "problem's tests in a sandbox without network. Exit 0 when the run completed, 3 when no request "
            "succeeded or the sandbox cannot be set up.";
        c.groups.push_back(endpoint_group());
        c.groups.push_back(
            {"Problems and requests",
             {required("out", "R.jsonl", "the per-problem results (JSONL)"),
              valued("problems", "F.jsonl|builtin", "the problem set (JSONL: task_id, prompt, entry_point, test)",
                     "builtin"),
              valued("prompt-field", "FIELD", "the problem field sent as the prompt",
                     "prompt, else instruct_prompt"),
              valued("concurrency", "N", "requests in flight", "8"),
              valued("threads", "N", "load-generator I/O threads", "1"),
              valued("max-tokens", "N", "completion limit per problem", "4096"),
              valued("temperature", "T", "sampling temperature", "0"),
              valued("top-p", "P", "nucleus sampling", "1"),
              valued("seed", "S", "sent as 'seed' when >= 0", "-1"),
              flag("thinking", "enable_thinking in chat_template_kwargs (reasoning before the answer)")}});
        c.groups.push_back(
            {"Sandbox",
             {valued("jobs", "N", "sandboxes at once", "half the cores"),
              valued("python", "PATH", "the interpreter (absolute; readable by nobody when run as root)",
                     "/usr/bin/python3"),
              valued("wall-s", "S", "wall-clock limit per problem", "30"),
              valued("cpu-s", "S", "CPU-time limit per problem (RLIMIT_CPU)", "20"),
              valued("memory-mb", "MB", "address-space limit (RLIMIT_AS)", "2048"),
              valued("file-mb", "MB", "file-size limit (RLIMIT_FSIZE)", "16"),
              valued("work-dir", "DIR", "parent of the per-problem directories", "$TMPDIR or /tmp"),
              flag("no-network-isolation", "run without network and PID namespaces (hosts that forbid them)")}});
        return c;
    }();
    return spec;
}

const CommandSpec& eval_problems_spec() {
    static const CommandSpec spec = [] {
        CommandSpec c;
        c.name = "eval problems";
        c.summary = "write the built-in problem set as JSONL (the problem format's example)";
        c.usage = "eval problems --out F.jsonl";
        c.groups.push_back({"Output", {required("out", "F.jsonl", "where to write the problems")}});
        return c;
    }();
    return spec;
}

const CommandSpec& eval_compare_spec() {
    static const CommandSpec spec = [] {
        CommandSpec c;
        c.name = "eval compare";
        c.summary = "paired table, exact McNemar p, difference interval and token usage of two `eval code` runs";
        c.usage = "eval compare A.jsonl B.jsonl [--alpha 0.05] [--margin M]";
        c.description =
            "Pairs the results by task_id. With --margin the exit code is the non-inferiority verdict: 0 when B is "
            "shown not worse than A by more than M, 1 when it is not shown.";
        c.takes_positional = true;
        c.groups.push_back(
            {"Statistics",
             {valued("alpha", "A", "the interval is (1 - A); 0.10 gives the one-sided 5% bound", "0.05"),
              valued("margin", "M", "non-inferiority margin as a fraction (0.05 = 5 points)", "none")}});
        return c;
    }();
    return spec;
}

const CommandSpec& eval_power_spec() {
    static const CommandSpec spec = [] {
        CommandSpec c;
        c.name = "eval power";
        c.summary = "paired problems needed to detect a pass-rate difference (Connor and exact McNemar)";
        c.usage = "eval power --difference D [--discordance P | --pass-rate P] [options]";
        c.groups.push_back(
            {"Question",
             {valued("difference", "D", "the difference in pass rate to detect (0.10 = ten points)", "0.10"),
              valued("discordance", "P", "the share of problems on which A and B disagree", "0.28"),
              valued("pass-rate", "P", "instead of --discordance: A's pass rate, assuming independent errors"),
              valued("alpha", "A", "two-sided significance", "0.05"),
              valued("power", "P", "the power wanted", "0.80"),
              valued("max-n", "N", "the largest n the exact search examines", "max(2 x Connor + 100, 400)")}});
        return c;
    }();
    return spec;
}

const CommandSpec& eval_niah_spec() {
    static const CommandSpec spec = [] {
        CommandSpec c;
        c.name = "eval niah";
        c.summary = "needle in a haystack: lengths x depths, exact answers, table and SVG heatmap";
        c.usage = "eval niah --url URL --out N.jsonl [options] | eval niah --results N.jsonl [--html F]";
        c.description =
            "Prompt lengths are tokens as the server counts them (calibrated by probe requests). "
            "`campaign report --niah N.jsonl` adds the heatmap to the campaign report.";
        OptionGroup ep = endpoint_group();
        ep.options.front().required = false;  // not with --results
        c.groups.push_back(ep);
        c.groups.push_back(
            {"Grid",
             {valued("out", "N.jsonl", "the per-request results (JSONL); required with --url"),
              valued("lengths", "N,N,...", "target prompt lengths in tokens", "4096,16384,65536,131072,220000"),
              valued("depths", "D,D,...", "needle depths, 0 = start of the text, 1 = end", "0,0.25,0.5,0.75,1"),
              valued("samples", "N", "prompts per cell (different needles)", "1"),
              valued("max-model-len", "N", "the server's context: lengths + max-tokens must fit", "262144"),
              valued("max-tokens", "N", "completion limit per request", "32"),
              valued("concurrency", "N", "requests in flight", "1"),
              valued("seed", "S", "filler and needles", "1"),
              valued("chars-per-token", "X", "skip the calibration probes and size prompts with this"),
              valued("overhead-tokens", "N", "with --chars-per-token: tokens of template and question", "40"),
              valued("needle", "TEMPLATE", "the needle sentence; {key} and {answer} are replaced",
                     "The special magic number for {key} is {answer}.")}});
        c.groups.push_back(
            {"Output",
             {valued("results", "N.jsonl", "render saved results instead of running"),
              valued("markdown", "T.md", "the grid as a Markdown table"),
              valued("html", "T.html", "a page with the heatmap and the table")}});
        return c;
    }();
    return spec;
}

}  // namespace qs::cli

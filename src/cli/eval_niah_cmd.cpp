// `qwenserve eval niah --url URL --out R.jsonl [--lengths 4096,16384,65536,131072,220000
//  --depths 0,0.25,0.5,0.75,1 --samples 1 --max-model-len 262144 --max-tokens 32
//  --concurrency 1 --seed 1 --model NAME --api-key K --timeout-s S --chars-per-token X
//  --overhead-tokens N --needle TEMPLATE --markdown T.md --html T.html]`: the needle-in-a-haystack
// grid (eval/niah.h) against an OpenAI-compatible endpoint; prints the table, writes one JSON line
// per request, and optionally the table as Markdown and a standalone HTML page with the heatmap
// (`campaign report --niah R.jsonl` puts the same section into the campaign report).
// `eval niah --results R.jsonl --markdown/--html` re-renders saved results. Main thread.
#include <cstdio>
#include <fstream>
#include <sstream>

#include <fmt/format.h>

#include "cli/commands.h"
#include "core/args.h"
#include "eval/niah.h"
#include "eval/niah_report.h"

namespace qs::cli {

namespace {

Result<std::vector<double>> parse_double_list(const std::string& text, const std::string& what) {
    std::vector<double> out;
    std::stringstream ss(text);
    std::string item;
    while (std::getline(ss, item, ',')) {
        char* end = nullptr;
        double v = std::strtod(item.c_str(), &end);
        if (item.empty() || end != item.c_str() + item.size())
            return invalid_argument(fmt::format("{}: '{}' is not a number", what, item));
        out.push_back(v);
    }
    if (out.empty()) return invalid_argument(what + " is empty");
    return out;
}

Status write_text(const std::string& path, const std::string& text) {
    std::ofstream f(path, std::ios::binary | std::ios::trunc);
    f << text;
    if (!f) return io_error("cannot write '" + path + "'");
    return Status::ok();
}

Status render(const std::vector<eval::NiahResult>& results, const Args& args,
              const std::string& source) {
    eval::NiahGrid g = eval::niah_grid(results);
    std::string md = eval::niah_markdown(g);
    std::fputs(md.c_str(), stdout);
    if (auto p = args.get("markdown")) QS_RETURN_IF_ERROR(write_text(*p, md));
    if (auto p = args.get("html")) {
        std::string page =
            "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
            "<title>Needle in a haystack</title>\n<style>body { font-family: sans-serif; margin: "
            "2em; } table { border-collapse: collapse; } th, td { border: 1px solid #ccc; "
            "padding: 4px 8px; } td.num { text-align: right; } .note { color: #666; }</style>\n"
            "</head>\n<body>\n" +
            eval::niah_html_section(g, source) + "</body>\n</html>\n";
        QS_RETURN_IF_ERROR(write_text(*p, page));
    }
    return Status::ok();
}

}  // namespace

int run_eval_niah(int argc, char** argv) {
    constexpr const char* kCmd = "eval niah";
    int code = 0;
    auto args = parse_command(eval_niah_spec(), argc, argv, code);
    if (!args) return code;
    if (auto saved = args->get("results")) {
        auto results = eval::read_niah_results(*saved);
        if (!results.is_ok()) return fail(kCmd, results.status());
        Status s = render(*results, *args, *saved);
        return s.is_ok() ? 0 : fail(kCmd, s);
    }
    auto url_s = args->require("url");
    if (!url_s.is_ok()) return fail(kCmd, url_s.status());
    auto out = args->require("out");
    if (!out.is_ok()) return fail(kCmd, out.status());
    auto url = bench::parse_url(*url_s);
    if (!url.is_ok()) return fail(kCmd, url.status());
    eval::NiahOptions o;
    o.url = *url;
    o.api_key = args->get_or("api-key", "");
    o.model = args->get_or("model", o.model);
    o.needle_template = args->get_or("needle", "");
    auto lengths =
        parse_int_list(args->get_or("lengths", "4096,16384,65536,131072,220000"), "--lengths");
    auto depths = parse_double_list(args->get_or("depths", "0,0.25,0.5,0.75,1"), "--depths");
    auto samples = args->get_int("samples", o.samples);
    auto max_len = args->get_int("max-model-len", o.max_model_len);
    auto max_tokens = args->get_int("max-tokens", o.max_tokens);
    auto concurrency = args->get_int("concurrency", o.concurrency);
    auto seed = args->get_int("seed", 1);
    auto timeout = args->get_double("timeout-s", 0);
    auto cpt = args->get_double("chars-per-token", 0);
    auto overhead = args->get_double("overhead-tokens", o.fit.overhead_tokens);
    for (const Status* s : {&lengths.status(), &depths.status(), &samples.status(),
                            &max_len.status(), &max_tokens.status(), &concurrency.status(),
                            &seed.status(), &timeout.status(), &cpt.status(), &overhead.status()})
        if (!s->is_ok()) return fail(kCmd, *s);
    if (*concurrency < 1 || *max_tokens < 1)
        return fail(kCmd, invalid_argument("--concurrency and --max-tokens must be positive"));
    o.lengths = *lengths;
    o.depths = *depths;
    o.samples = *samples;
    o.max_model_len = *max_len;
    o.max_tokens = *max_tokens;
    o.concurrency = *concurrency;
    o.seed = uint64_t(*seed);
    o.timeout_s = *timeout;
    if (args->has("chars-per-token")) {
        if (!(*cpt > 0)) return fail(kCmd, invalid_argument("--chars-per-token must be positive"));
        o.calibrate = false;
        o.fit.chars_per_token = *cpt;
        o.fit.overhead_tokens = *overhead;
    }
    eval::TokenFit fit;
    auto results = eval::run_niah(o, &fit);
    if (!results.is_ok()) return fail(kCmd, results.status());
    Status w = eval::write_niah_results(*out, *results);
    if (!w.is_ok()) return fail(kCmd, w);
    std::printf("token fit (%s): %.3f characters per token, %.1f tokens of overhead\n",
                o.calibrate ? "calibrated" : "given", fit.chars_per_token, fit.overhead_tokens);
    Status s = render(*results, *args, *out);
    if (!s.is_ok()) return fail(kCmd, s);
    std::fprintf(stderr, "results -> %s\n", out->c_str());
    return 0;
}

}  // namespace qs::cli

// `qwenserve campaign report --ledger L.jsonl --output report.html [--markdown report.md]
//  [--control EXPERIMENT] [--title T] [--gpu-hourly-cost USD] [--niah R1.jsonl,R2.jsonl]`: the
// ledger as one self-contained HTML file with inline SVG charts (bench/campaign_report.h) and/or a
// Markdown summary; --niah adds each `eval niah` result file as a heatmap section.
// Main thread only.
#include <cstdio>
#include <fstream>

#include "bench/campaign_report.h"
#include "bench/campaign_summary.h"
#include "bench/ledger.h"
#include "cli/commands.h"
#include "core/args.h"
#include "eval/niah.h"
#include "eval/niah_report.h"

namespace qs::cli {

namespace {
Status write_file(const std::string& path, const std::string& text) {
    std::ofstream f(path, std::ios::binary | std::ios::trunc);
    f << text;
    if (!f) return io_error("cannot write '" + path + "'");
    return Status::ok();
}
}  // namespace

const CommandSpec& campaign_report_spec() {
    static const CommandSpec spec = [] {
        CommandSpec c;
        c.name = "campaign report";
        c.summary = "the ledger as one self-contained HTML file with inline SVG charts, and/or Markdown";
        c.usage = "campaign report --ledger L.jsonl --output report.html [--markdown report.md] [options]";
        c.groups.push_back(
            {"Report",
             {required("ledger", "L.jsonl", "the campaign ledger"),
              valued("output", "report.html", "the HTML report (this and/or --markdown)"),
              valued("markdown", "report.md", "the Markdown summary"),
              valued("control", "EXPERIMENT", "the experiment the others are judged against", "the first that passed its gates"),
              valued("title", "TITLE", "the report's title", bench::ReportOptions{}.title),
              valued("gpu-hourly-cost", "USD", "price of the GPU per hour, for $ per million tokens (0: none)",
                     "0"),
              valued("niah", "N.jsonl[,M.jsonl]", "`eval niah` results to add as heatmap sections")}});
        return c;
    }();
    return spec;
}

int run_campaign_report(int argc, char** argv) {
    constexpr const char* kCmd = "campaign report";
    int code = 0;
    auto args = parse_command(campaign_report_spec(), argc, argv, code);
    if (!args) return code;
    auto ledger_path = args->require("ledger");
    if (!ledger_path.is_ok()) return fail(kCmd, ledger_path.status());
    auto html_path = args->get("output");
    auto md_path = args->get("markdown");
    if (!html_path && !md_path)
        return fail(kCmd,
                    invalid_argument("give --output report.html and/or --markdown report.md"));
    auto cost = args->get_double("gpu-hourly-cost", 0.0);
    if (!cost.is_ok()) return fail(kCmd, cost.status());
    auto ledger = bench::read_ledger(*ledger_path);
    if (!ledger.is_ok()) return fail(kCmd, ledger.status());
    auto summary = bench::summarize_campaign(*ledger, args->get_or("control", ""), *cost);
    if (!summary.is_ok()) return fail(kCmd, summary.status());
    bench::ReportOptions o;
    o.title = args->get_or("title", o.title);
    o.ledger_path = *ledger_path;
    if (auto niah = args->get("niah")) {
        size_t begin = 0;
        while (begin <= niah->size()) {
            size_t comma = niah->find(',', begin);
            std::string path =
                niah->substr(begin, comma == std::string::npos ? comma : comma - begin);
            begin = comma == std::string::npos ? niah->size() + 1 : comma + 1;
            if (path.empty()) continue;
            auto results = eval::read_niah_results(path);
            if (!results.is_ok()) return fail(kCmd, results.status());
            eval::NiahGrid g = eval::niah_grid(*results);
            o.extra_html.push_back(eval::niah_html_section(g, path));
            o.extra_markdown.push_back("## Needle in a haystack (`" + path + "`)\n\n" +
                                       eval::niah_markdown(g));
        }
    }
    if (html_path) {
        Status s = write_file(*html_path, bench::html_report(*summary, *ledger, o));
        if (!s.is_ok()) return fail(kCmd, s);
    }
    if (md_path) {
        Status s = write_file(*md_path, bench::markdown_report(*summary, *ledger, o));
        if (!s.is_ok()) return fail(kCmd, s);
    }
    std::fprintf(stderr, "%zu experiments, %zu ledger lines%s%s\n", summary->experiments.size(),
                 ledger->size(), html_path ? (" -> " + *html_path).c_str() : "",
                 md_path ? (" -> " + *md_path).c_str() : "");
    return 0;
}

}  // namespace qs::cli

// HTML and Markdown campaign reports (see campaign_report.h).
#include "bench/campaign_report.h"

#include <fmt/format.h>

#include "bench/svg_chart.h"

namespace qs::bench {

namespace {

// Chart rows are named by experiment id and client count (the configuration is in the
// tooltip and the decision table): long knob labels would be cut where they differ.
std::string level_name(const ExperimentSummary& x, const LevelSummary& l) {
    return l.clients > 0 ? fmt::format("{} @ {} clients", x.id, l.clients) : x.id;
}

std::string level_detail(const ExperimentSummary& x, const LevelSummary& l) {
    return level_name(x, l) + (x.id == x.label ? "" : ": " + x.label);
}

std::string money(double usd) { return usd > 0 ? fmt::format("{:.4f}", usd) : "-"; }

const char* kStyle = R"(<style>
body { font-family: sans-serif; margin: 2em; color: #222; }
table { border-collapse: collapse; margin: 1em 0; font-size: 13px; }
th, td { border: 1px solid #ccc; padding: 4px 8px; text-align: left; vertical-align: top; }
th { background: #f2f2f2; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
.pass { color: #1a7f37; } .fail { color: #c62828; font-weight: bold; }
.gate { display: inline-block; margin-right: 6px; }
.adopt { color: #1a7f37; font-weight: bold; } .reject { color: #c62828; }
.chart { display: block; margin: 1em 0; }
.note { color: #666; }
</style>
)";

std::string decision_class(const std::string& d) {
    if (d.rfind("ADOPT", 0) == 0) return "adopt";
    if (d.rfind("REJECT", 0) == 0 || d == "failed") return "reject";
    return "";
}

std::string md_cell(const std::string& s) {
    std::string out;
    for (char c : s) {
        if (c == '|')
            out += "\\|";
        else if (c == '\n')
            out += ' ';
        else
            out += c;
    }
    return out;
}

}  // namespace

std::string html_report(const CampaignSummary& sum, const std::vector<LedgerEntry>& ledger,
                        const ReportOptions& o) {
    std::string h = "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n";
    h += "<title>" + xml_escape(o.title) + "</title>\n" + kStyle + "</head>\n<body>\n";
    h += "<h1>" + xml_escape(o.title) + "</h1>\n";
    h += fmt::format("<p>Ledger <code>{}</code>: {} lines, {} experiments. Control: {}.</p>\n",
                     xml_escape(o.ledger_path), sum.num_runs, sum.experiments.size(),
                     sum.control.empty() ? "none (no experiment passed its gates)"
                                         : "<code>" + xml_escape(sum.control) + "</code>");

    std::vector<Series> tput;
    std::vector<BarGroup> ttft, cost;
    for (const auto& x : sum.experiments) {
        if (!x.ok) continue;
        Series s{x.id == x.label ? x.id : x.id + " " + x.label, {}};
        for (const auto& l : x.levels) {
            if (l.clients > 0) s.points.emplace_back(double(l.clients), l.steady_tps);
            ttft.push_back({level_name(x, l),
                            {l.ttft.median_s * 1e3, l.ttft.p90_s * 1e3, l.ttft.p99_s * 1e3},
                            level_detail(x, l)});
            if (l.usd_per_m > 0)
                cost.push_back({level_name(x, l), {l.usd_per_m}, level_detail(x, l)});
        }
        if (!s.points.empty()) tput.push_back(std::move(s));
    }
    h += "<h2>Throughput against offered clients</h2>\n";
    h += svg_line_chart("Steady completion tokens/s against offered clients", "offered clients",
                        "completion tok/s (steady, mean of runs)", tput);
    h += "<h2>Time to first token</h2>\n";
    h += svg_hbar_chart("TTFT percentiles (mean of runs)", "milliseconds", {"median", "p90", "p99"},
                        ttft);
    h += "<h2>Cost per million completion tokens</h2>\n";
    if (cost.empty())
        h += "<p class=\"note\">No cost recorded: pass --gpu-hourly-cost to the sweep or bench, "
             "or to campaign report.</p>\n";
    h +=
        svg_hbar_chart("$ per million completion tokens (steady throughput)", "USD", {"$/M"}, cost);

    for (const auto& section : o.extra_html) h += section;

    h += "<h2>Decision ledger</h2>\n<table>\n<tr><th>experiment</th><th>configuration</th>"
         "<th>gates</th><th>clients</th><th>runs</th><th>steady tok/s</th>"
         "<th>TTFT median / p99 (ms)</th><th>$/M</th><th>decision</th></tr>\n";
    for (const auto& x : sum.experiments) {
        std::string gates;
        for (const auto& g : x.gates)
            gates += fmt::format("<span class=\"gate {}\" title=\"{}\">{} {}</span>",
                                 g.passed ? "pass" : "fail", xml_escape(g.detail),
                                 xml_escape(g.name), g.passed ? "&#10003;" : "&#10007;");
        if (!x.reason.empty())
            gates += "<br><span class=\"fail\">" + xml_escape(x.reason) + "</span>";
        std::string clients, runs, tps, lat, usd, dec;
        for (const auto& l : x.levels) {
            auto br = [](std::string& s) { s += s.empty() ? "" : "<br>"; };
            br(clients), br(runs), br(tps), br(lat), br(usd), br(dec);
            clients += l.clients > 0 ? std::to_string(l.clients) : "?";
            runs += std::to_string(l.num_runs);
            tps += fmt::format("{:.1f}", l.steady_tps);
            lat += fmt::format("{:.1f} / {:.1f}", l.ttft.median_s * 1e3, l.ttft.p99_s * 1e3);
            usd += money(l.usd_per_m);
            dec += "<span class=\"" + decision_class(l.decision) + "\">" + xml_escape(l.decision) +
                   "</span>";
        }
        h += fmt::format(
            "<tr><td><code>{}</code></td><td>{}</td><td>{}</td><td class=\"num\">{}</td>"
            "<td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td>"
            "<td class=\"num\">{}</td><td><span class=\"{}\">{}</span>{}</td></tr>\n",
            xml_escape(x.id), xml_escape(x.label), gates, clients, runs, tps, lat, usd,
            decision_class(x.decision), xml_escape(x.decision),
            dec.empty() || x.is_control ? "" : "<br>" + dec);
    }
    h += "</table>\n<p class=\"note\">Decision: at each client count, the adoption rule "
         "(clean, replicated, every run &ge; control mean &times; 1.0075, fresh start above "
         "3%) on the experiment's runs against the control's runs at the same count. Hover a "
         "gate for its detail.</p>\n";

    h += "<h2>Runs</h2>\n<table>\n<tr><th>experiment</th><th>config</th><th>run</th>"
         "<th>status</th><th>clients</th><th>completed</th><th>errors</th>"
         "<th>steady tok/s</th><th>overall tok/s</th><th>TTFT median / p99 (ms)</th>"
         "<th>$/M</th><th>fresh start</th></tr>\n";
    for (const auto& e : ledger) {
        // A failed line's zeros are not measurements: show dashes.
        auto n1 = [&](double v) { return e.ok() ? fmt::format("{:.1f}", v) : std::string("-"); };
        h += fmt::format(
            "<tr><td><code>{}</code></td><td>{}</td><td>{}</td><td class=\"{}\">{}</td>"
            "<td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td>"
            "<td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{} / {}</td>"
            "<td class=\"num\">{}</td><td>{}</td></tr>\n",
            xml_escape(e.experiment), xml_escape(e.config), xml_escape(e.run),
            e.ok() ? "pass" : "fail", e.ok() ? "ok" : xml_escape("failed: " + e.reason),
            e.clients > 0 ? std::to_string(e.clients) : "-",
            e.ok() ? fmt::format("{} / {}", e.completed, e.num_requests) : "-",
            e.ok() ? std::to_string(e.errors + e.incomplete) : "-", n1(e.steady_output_throughput),
            n1(e.output_throughput), n1(e.ttft.median_s * 1e3), n1(e.ttft.p99_s * 1e3),
            money(e.usd_per_m_steady), e.fresh_start ? "yes" : "no");
    }
    h += "</table>\n</body>\n</html>\n";
    return h;
}

std::string markdown_report(const CampaignSummary& sum, const std::vector<LedgerEntry>& ledger,
                            const ReportOptions& o) {
    std::string m = "# " + o.title + "\n\n";
    m += fmt::format("Ledger `{}`: {} lines, {} experiments. Control: {}.\n\n", o.ledger_path,
                     sum.num_runs, sum.experiments.size(),
                     sum.control.empty() ? "none" : "`" + sum.control + "`");
    for (const auto& section : o.extra_markdown) m += section + "\n";
    m += "## Decision ledger\n\n| experiment | configuration | gates | clients | runs | steady "
         "tok/s | TTFT median / p99 (ms) | $/M | decision |\n|---|---|---|---:|---:|---:|---:|"
         "---:|---|\n";
    for (const auto& x : sum.experiments) {
        std::string gates;
        for (const auto& g : x.gates)
            gates += (gates.empty() ? "" : " ") + g.name + (g.passed ? " ok" : " FAIL");
        if (!x.reason.empty()) gates += " — " + x.reason;
        if (x.levels.empty())
            m += fmt::format("| {} | {} | {} | | | | | | {} |\n", md_cell(x.id), md_cell(x.label),
                             md_cell(gates), md_cell(x.decision));
        for (size_t i = 0; i < x.levels.size(); ++i) {
            const auto& l = x.levels[i];
            std::string dec = x.is_control ? "control" : l.decision;
            m += fmt::format("| {} | {} | {} | {} | {} | {:.1f} | {:.1f} / {:.1f} | {} | {} |\n",
                             i == 0 ? md_cell(x.id) : "", i == 0 ? md_cell(x.label) : "",
                             i == 0 ? md_cell(gates) : "", l.clients, l.num_runs, l.steady_tps,
                             l.ttft.median_s * 1e3, l.ttft.p99_s * 1e3, money(l.usd_per_m),
                             md_cell(dec));
        }
    }
    m += "\n## Runs\n\n| experiment | config | run | status | clients | completed | steady "
         "tok/s | overall tok/s | TTFT median / p99 (ms) | $/M |\n|---|---|---|---|---:|---:|"
         "---:|---:|---:|---:|\n";
    for (const auto& e : ledger) {
        auto n1 = [&](double v) { return e.ok() ? fmt::format("{:.1f}", v) : std::string("-"); };
        m += fmt::format(
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} / {} | {} |\n", md_cell(e.experiment),
            md_cell(e.config), md_cell(e.run), e.ok() ? "ok" : md_cell("failed: " + e.reason),
            e.clients > 0 ? std::to_string(e.clients) : "-",
            e.ok() ? fmt::format("{} / {}", e.completed, e.num_requests) : "-",
            n1(e.steady_output_throughput), n1(e.output_throughput), n1(e.ttft.median_s * 1e3),
            n1(e.ttft.p99_s * 1e3), money(e.usd_per_m_steady));
    }
    return m;
}

}  // namespace qs::bench

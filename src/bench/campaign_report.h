// `qwenserve campaign report` output: one self-contained HTML file (inline CSS and SVG charts,
// no scripts, no external references) and an optional Markdown summary, both from the ledger
// grouped by bench/campaign_summary. The HTML holds: steady throughput against offered clients
// (one line per experiment), TTFT percentiles per experiment and client count, $/M completion
// tokens per configuration, the decision ledger (each experiment, its gates, its decision
// against the control) and every ledger line. Pure string building; the CLI's main thread.
#pragma once

#include <string>
#include <vector>

#include "bench/campaign_summary.h"
#include "bench/ledger.h"

namespace qs::bench {

struct ReportOptions {
    std::string title = "qwenserve campaign";
    std::string ledger_path;  // shown in the header
    // Further sections appended before the ledger tables (e.g. the NIAH heatmap of `eval niah`,
    // which cli/ renders): HTML fragments for html_report, Markdown for markdown_report.
    std::vector<std::string> extra_html, extra_markdown;
};

std::string html_report(const CampaignSummary& summary, const std::vector<LedgerEntry>& ledger,
                        const ReportOptions& options);
std::string markdown_report(const CampaignSummary& summary, const std::vector<LedgerEntry>& ledger,
                            const ReportOptions& options);

}  // namespace qs::bench

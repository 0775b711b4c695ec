// Campaign report on a synthetic ledger: experiments grouped with per-client-count means and
// decisions against the control, and the HTML file: self-contained (no script, no URL), three
// inline SVG charts, every experiment id, escaped labels, the failed experiment's reason; the
// Markdown summary; the SVG helpers' ticks and empty charts.
#include "bench/campaign_report.h"

#include <gtest/gtest.h>

#include "bench/campaign_summary.h"
#include "bench/svg_chart.h"

namespace qs::bench {
namespace {

LedgerEntry run(const std::string& exp, const std::string& label, int64_t clients, double tps,
                double ttft_ms) {
    LedgerEntry e;
    e.experiment = exp;
    e.config = label + "@c" + std::to_string(clients);
    e.run = exp + "/" + std::to_string(clients);
    e.knobs = {{"max_num_seqs", label}};
    e.clients = clients;
    e.steady_output_throughput = tps;
    e.output_throughput = tps * 0.9;
    e.num_requests = e.completed = 100;
    e.fresh_start = true;
    e.ttft = {ttft_ms / 1e3, ttft_ms / 1e3, 2 * ttft_ms / 1e3, 3 * ttft_ms / 1e3};
    e.gpu_hourly_cost = 3.6;
    e.usd_per_m_steady = 3.6e6 / (tps * 3600);
    e.gates = {{"start", true, "/health 200 after 0.2 s"}, {"measured", true, "fine"}};
    return e;
}

std::vector<LedgerEntry> ledger() {
    std::vector<LedgerEntry> l = {run("s-p1", "64", 4, 1000, 10), run("s-p1", "64", 4, 1000, 12),
                                  run("s-p1", "64", 16, 3000, 20), run("s-p1", "64", 16, 3000, 22),
                                  // +2.5% at 4 clients (adopt), +0.17% at 16 (not enough)
                                  run("s-p2", "a<b", 4, 1020, 9), run("s-p2", "a<b", 4, 1030, 9),
                                  run("s-p2", "a<b", 16, 3010, 19),
                                  run("s-p2", "a<b", 16, 3000, 19)};
    LedgerEntry failed;
    failed.experiment = "s-p3";
    failed.config = "max_num_seqs=0";
    failed.knobs = {{"max_num_seqs", "0"}};
    failed.status = "failed";
    failed.reason = "start: server exit code 2 before /health answered 200";
    failed.gates = {{"start", false, "server exit code 2"}};
    l.push_back(failed);
    LedgerEntry manual;  // a `campaign record` line: no experiment, no clients
    manual.config = "manual";
    manual.steady_output_throughput = 500;
    l.push_back(manual);
    return l;
}

size_t count(const std::string& text, const std::string& what) {
    size_t n = 0;
    for (size_t p = text.find(what); p != std::string::npos; p = text.find(what, p + 1)) ++n;
    return n;
}

TEST(BenchCampaignReport, SummaryGroupsAndDecides) {
    auto l = ledger();
    auto s = summarize_campaign(l, "", 0).value();
    EXPECT_EQ(s.control, "s-p1");
    EXPECT_EQ(s.num_runs, 10);
    ASSERT_EQ(s.experiments.size(), 4u);
    const auto& p1 = s.experiments[0];
    EXPECT_TRUE(p1.is_control);
    ASSERT_EQ(p1.levels.size(), 2u);
    EXPECT_EQ(p1.levels[0].clients, 4);
    EXPECT_EQ(p1.levels[0].num_runs, 2);
    EXPECT_DOUBLE_EQ(p1.levels[0].steady_tps, 1000);
    EXPECT_NEAR(p1.levels[0].ttft.median_s, 0.011, 1e-12);
    EXPECT_NEAR(p1.levels[0].usd_per_m, 1.0, 1e-12);  // $3.60/h at 1000 tok/s
    const auto& p2 = s.experiments[1];
    EXPECT_EQ(p2.label, "max_num_seqs=a<b");
    EXPECT_TRUE(p2.levels[0].adopt);
    EXPECT_EQ(p2.levels[0].decision, "ADOPT +2.50%");
    EXPECT_FALSE(p2.levels[1].adopt);
    EXPECT_NE(p2.levels[1].decision.find("REJECT"), std::string::npos);
    EXPECT_NE(p2.levels[1].decision.find("improvement"), std::string::npos);
    EXPECT_EQ(p2.decision, "REJECT");
    EXPECT_FALSE(s.experiments[2].ok);
    EXPECT_EQ(s.experiments[2].decision, "failed");
    EXPECT_EQ(s.experiments[3].id, "manual");
    EXPECT_EQ(s.experiments[3].decision, "no control");

    // A named control; a cost given to the report recomputes $/M.
    auto named = summarize_campaign(l, "s-p2", 7.2).value();
    EXPECT_EQ(named.control, "s-p2");
    EXPECT_NEAR(named.experiments[0].levels[0].usd_per_m, 2.0, 1e-12);
    EXPECT_FALSE(summarize_campaign(l, "s-p9", 0).is_ok());
    EXPECT_FALSE(summarize_campaign(l, "s-p3", 0).is_ok());  // failed its gates
}

TEST(BenchCampaignReport, HtmlIsSelfContainedWithChartsAndEveryExperiment) {
    auto l = ledger();
    auto s = summarize_campaign(l, "", 0).value();
    ReportOptions o;
    o.title = "Sweep <1>";
    o.ledger_path = "ledger.jsonl";
    std::string h = html_report(s, l, o);
    EXPECT_EQ(h.rfind("<!DOCTYPE html>", 0), 0u);
    EXPECT_NE(h.find("</html>"), std::string::npos);
    EXPECT_EQ(count(h, "<svg"), 3u);  // throughput, TTFT, $/M
    EXPECT_EQ(count(h, "</svg>"), 3u);
    EXPECT_EQ(h.find("<script"), std::string::npos);
    EXPECT_EQ(h.find("http"), std::string::npos);  // nothing fetched from anywhere
    for (const char* id : {"s-p1", "s-p2", "s-p3", "manual"})
        EXPECT_NE(h.find(std::string("<code>") + id + "</code>"), std::string::npos) << id;
    EXPECT_NE(h.find("Sweep &lt;1&gt;"), std::string::npos);
    EXPECT_NE(h.find("max_num_seqs=a&lt;b"), std::string::npos);
    EXPECT_EQ(h.find("a<b"), std::string::npos);
    EXPECT_NE(h.find("start: server exit code 2 before /health answered 200"), std::string::npos);
    EXPECT_NE(h.find("ADOPT +2.50%"), std::string::npos);
    EXPECT_NE(h.find("offered clients"), std::string::npos);
    EXPECT_EQ(h.find("(log scale)"), std::string::npos) << "clients 4 and 16 span only 4x";
}

TEST(BenchCampaignReport, NoCostNoteAndMarkdown) {
    auto l = ledger();
    for (auto& e : l) e.usd_per_m_steady = 0, e.gpu_hourly_cost = 0;
    auto s = summarize_campaign(l, "", 0).value();
    ReportOptions o;
    std::string h = html_report(s, l, o);
    EXPECT_NE(h.find("No cost recorded"), std::string::npos);
    EXPECT_EQ(count(h, "<svg"), 3u);  // the $/M chart says "no data"
    EXPECT_NE(h.find("no data"), std::string::npos);

    std::string m = markdown_report(s, l, o);
    EXPECT_NE(m.find("| s-p1 |"), std::string::npos);
    EXPECT_NE(m.find("| s-p3 |"), std::string::npos);
    EXPECT_NE(m.find("ADOPT +2.50%"), std::string::npos);
    EXPECT_NE(m.find("failed: start: server exit code 2"), std::string::npos);
    EXPECT_EQ(m.find("<svg"), std::string::npos);
}

TEST(BenchSvgChart, TicksAndEmptyCharts) {
    EXPECT_EQ(nice_ticks(1234, 5), (std::vector<double>{0, 500, 1000, 1500}));
    EXPECT_EQ(nice_ticks(1000, 5), (std::vector<double>{0, 200, 400, 600, 800, 1000}));
    EXPECT_EQ(nice_ticks(0, 5), (std::vector<double>{0, 1}));
    EXPECT_NE(svg_line_chart("t", "x", "y", {}).find("no data"), std::string::npos);
    std::string c = svg_line_chart("t", "clients", "tok/s", {{"a", {{1, 10}, {8, 80}}}});
    EXPECT_NE(c.find("(log scale)"), std::string::npos);
    EXPECT_NE(c.find("<polyline"), std::string::npos);
    EXPECT_EQ(xml_escape("<a href=\"x\">&'"), "&lt;a href=&quot;x&quot;&gt;&amp;&#39;");
}

}  // namespace
}  // namespace qs::bench

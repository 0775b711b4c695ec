// NIAH grid, table and heatmap (see niah_report.h).
#include "eval/niah_report.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "bench/svg_chart.h"
#include "bench/svg_heatmap.h"

namespace qs::eval {

namespace {

template <typename T>
size_t index_of(const std::vector<T>& v, T x) {
    return size_t(std::find(v.begin(), v.end(), x) - v.begin());
}

std::string length_name(int64_t l) {
    if (l >= 1024 && l % 1024 == 0) return fmt::format("{}K", l / 1024);
    return fmt::format("{}", l);
}

}  // namespace

NiahGrid niah_grid(const std::vector<NiahResult>& results) {
    NiahGrid g;
    for (const auto& r : results) {
        g.lengths.push_back(r.c.target_tokens);
        g.depths.push_back(r.c.depth);
    }
    std::sort(g.lengths.begin(), g.lengths.end());
    g.lengths.erase(std::unique(g.lengths.begin(), g.lengths.end()), g.lengths.end());
    std::sort(g.depths.begin(), g.depths.end());
    g.depths.erase(std::unique(g.depths.begin(), g.depths.end()), g.depths.end());
    g.passed.assign(g.lengths.size(), std::vector<int64_t>(g.depths.size(), 0));
    g.total = g.passed;
    g.prompt_tokens.assign(g.lengths.size(), std::vector<double>(g.depths.size(), 0.0));
    for (const auto& r : results) {
        size_t i = index_of(g.lengths, r.c.target_tokens), j = index_of(g.depths, r.c.depth);
        ++g.total[i][j];
        g.passed[i][j] += r.passed ? 1 : 0;
        g.prompt_tokens[i][j] += double(r.prompt_tokens);
        g.num_errors += r.error.empty() ? 0 : 1;
    }
    for (size_t i = 0; i < g.lengths.size(); ++i)
        for (size_t j = 0; j < g.depths.size(); ++j)
            if (g.total[i][j] > 0) g.prompt_tokens[i][j] /= double(g.total[i][j]);
    return g;
}

std::string niah_markdown(const NiahGrid& g) {
    std::string s = "| target tokens | prompt tokens (server) |";
    std::string rule = "|---:|---:|";
    for (double d : g.depths) {
        s += fmt::format(" depth {:.0f}% |", 100 * d);
        rule += "---:|";
    }
    s += " all |\n" + rule + "---:|\n";
    for (size_t i = 0; i < g.lengths.size(); ++i) {
        int64_t p = 0, t = 0;
        double tokens = 0;
        int64_t cells = 0;
        std::string row;
        for (size_t j = 0; j < g.depths.size(); ++j) {
            p += g.passed[i][j];
            t += g.total[i][j];
            if (g.total[i][j] > 0) tokens += g.prompt_tokens[i][j], ++cells;
            row += g.total[i][j] ? fmt::format(" {}/{} |", g.passed[i][j], g.total[i][j]) : " - |";
        }
        s += fmt::format("| {} | {:.0f} |{} {}/{} |\n", g.lengths[i], cells ? tokens / cells : 0.0,
                         row, p, t);
    }
    if (g.num_errors > 0)
        s += fmt::format("\n{} requests failed (counted as not found).\n", g.num_errors);
    return s;
}

std::string niah_html_section(const NiahGrid& g, const std::string& source) {
    bench::Heatmap h;
    h.title = "Needle in a haystack: exact answers";
    h.x_label = "needle depth (0% = start of the text)";
    h.y_label = "prompt tokens";
    for (double d : g.depths) h.x_names.push_back(fmt::format("{:.0f}%", 100 * d));
    for (size_t i = 0; i < g.lengths.size(); ++i) {
        h.y_names.push_back(length_name(g.lengths[i]));
        std::vector<double> vals;
        std::vector<std::string> texts, tips;
        for (size_t j = 0; j < g.depths.size(); ++j) {
            const int64_t t = g.total[i][j];
            vals.push_back(t ? double(g.passed[i][j]) / double(t) : NAN);
            texts.push_back(t ? fmt::format("{}/{}", g.passed[i][j], t) : "");
            tips.push_back(fmt::format(
                "{} target tokens ({:.0f} counted by the server), depth "
                "{:.0f}%: {} of {} exact",
                g.lengths[i], g.prompt_tokens[i][j], 100 * g.depths[j], g.passed[i][j], t));
        }
        h.values.push_back(vals);
        h.cell_text.push_back(texts);
        h.tooltips.push_back(tips);
    }
    std::string s = "<h2>Needle in a haystack</h2>\n";
    s += "<p class=\"note\">Results <code>" + bench::xml_escape(source) +
         "</code>: each cell is exact answers / samples (the first number in the reply must be "
         "the needle's).</p>\n";
    s += bench::svg_heatmap(h);
    s += "<table>\n<tr><th>target tokens</th><th>prompt tokens (server)</th>";
    for (double d : g.depths) s += fmt::format("<th>depth {:.0f}%</th>", 100 * d);
    s += "</tr>\n";
    for (size_t i = 0; i < g.lengths.size(); ++i) {
        double tokens = 0;
        int64_t cells = 0;
        for (size_t j = 0; j < g.depths.size(); ++j)
            if (g.total[i][j] > 0) tokens += g.prompt_tokens[i][j], ++cells;
        s += fmt::format("<tr><td class=\"num\">{}</td><td class=\"num\">{:.0f}</td>", g.lengths[i],
                         cells ? tokens / cells : 0.0);
        for (size_t j = 0; j < g.depths.size(); ++j)
            s += g.total[i][j]
                     ? fmt::format("<td class=\"num\">{}/{}</td>", g.passed[i][j], g.total[i][j])
                     : std::string("<td>-</td>");
        s += "</tr>\n";
    }
    s += "</table>\n";
    if (g.num_errors > 0)
        s += fmt::format("<p class=\"fail\">{} requests failed (counted as not found).</p>\n",
                         g.num_errors);
    return s;
}

}  // namespace qs::eval

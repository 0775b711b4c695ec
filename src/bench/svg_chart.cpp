// SVG drawing for the report charts (see svg_chart.h). Coordinates are in SVG user units
// (pixels at 100%); text assumes ~7 px per character at font-size 12 to size the label margin.
#include "bench/svg_chart.h"

#include <algorithm>
#include <cmath>
#include <set>

#include <fmt/format.h>

namespace qs::bench {

namespace {

constexpr double kCharW = 7.0;
constexpr size_t kMaxLabelChars = 44;

std::string num(double v) {  // tick labels: no trailing zeros, thousands kept short
    if (v != 0 && std::fabs(v) < 0.01) return fmt::format("{:.3g}", v);
    if (std::fabs(v - std::round(v)) < 1e-9) return fmt::format("{:.0f}", v);
    return fmt::format("{:.3g}", v);
}

std::string short_label(const std::string& s) {
    if (s.size() <= kMaxLabelChars) return s;
    size_t cut = kMaxLabelChars - 1;
    while (cut > 0 && (static_cast<unsigned char>(s[cut]) & 0xC0) == 0x80) --cut;
    return s.substr(0, cut) + "\u2026";
}

std::string open_svg(double w, double h, const std::string& title) {
    return fmt::format(
        "<svg class=\"chart\" width=\"{0:.0f}\" height=\"{1:.0f}\" viewBox=\"0 0 {0:.0f} {1:.0f}\" "
        "role=\"img\" font-family=\"sans-serif\" font-size=\"12\">\n<title>{2}</title>\n"
        "<text x=\"{3:.0f}\" y=\"18\" text-anchor=\"middle\" font-size=\"14\" "
        "font-weight=\"bold\">{2}</text>\n",
        w, h, xml_escape(title), w / 2);
}

std::string no_data(double w, const std::string& title) {
    return open_svg(w, 60, title) +
           fmt::format(
               "<text x=\"{:.0f}\" y=\"44\" text-anchor=\"middle\" fill=\"#666\">no "
               "data</text>\n</svg>\n",
               w / 2);
}

}  // namespace

std::string xml_escape(std::string_view s) {
    std::string out;
    out.reserve(s.size());
    for (char c : s) {
        switch (c) {
            case '&':
                out += "&amp;";
                break;
            case '<':
                out += "&lt;";
                break;
            case '>':
                out += "&gt;";
                break;
            case '"':
                out += "&quot;";
                break;
            case '\'':
                out += "&#39;";
                break;
            default:
                out += c;
        }
    }
    return out;
}

std::vector<double> nice_ticks(double max, int target_count) {
    if (!(max > 0)) return {0, 1};
    const double raw = max / std::max(1, target_count);
    const double mag = std::pow(10.0, std::floor(std::log10(raw)));
    double step = mag;
    for (double m : {1.0, 2.0, 5.0, 10.0})
        if (m * mag >= raw) {
            step = m * mag;
            break;
        }
    std::vector<double> t;
    for (int i = 0; double(i - 1) * step < max * (1 - 1e-12); ++i) t.push_back(double(i) * step);
    return t;
}

const char* series_colour(size_t i) {
    static const char* kPalette[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd",
                                     "#8c564b", "#e377c2", "#17becf", "#7f7f7f", "#bcbd22"};
    return kPalette[i % (sizeof(kPalette) / sizeof(kPalette[0]))];
}

std::string svg_line_chart(const std::string& title, const std::string& x_label,
                           const std::string& y_label, const std::vector<Series>& series) {
    const double w = 720, plot_h = 300, left = 70, right = 20, top = 34;
    std::set<double> xs;
    double y_max = 0;
    for (const auto& s : series)
        for (auto [x, y] : s.points) xs.insert(x), y_max = std::max(y_max, y);
    if (xs.empty()) return no_data(w, title);
    const bool log_x = *xs.begin() > 0 && *xs.rbegin() / *xs.begin() >= 8;
    auto fx = [&](double x) { return log_x ? std::log2(x) : x; };
    const double x_lo = xs.size() == 1 ? fx(*xs.begin()) - 1 : (log_x ? fx(*xs.begin()) : 0);
    const double x_hi = xs.size() == 1 ? fx(*xs.begin()) + 1 : fx(*xs.rbegin());
    const std::vector<double> yt = nice_ticks(y_max, 5);
    const double y_hi = yt.back();
    const double pw = w - left - right;
    auto px = [&](double x) { return left + (fx(x) - x_lo) / (x_hi - x_lo) * pw; };
    auto py = [&](double y) { return top + plot_h - y / y_hi * plot_h; };
    const double legend_y = top + plot_h + 48;
    const double h = legend_y + 18 * double(series.size()) + 8;

    std::string out = open_svg(w, h, title);
    for (double t : yt)
        out += fmt::format(
            "<line x1=\"{0:.1f}\" x2=\"{1:.1f}\" y1=\"{2:.1f}\" y2=\"{2:.1f}\" stroke=\"#ddd\"/>"
            "<text x=\"{3:.1f}\" y=\"{4:.1f}\" text-anchor=\"end\">{5}</text>\n",
            left, w - right, py(t), left - 6, py(t) + 4, num(t));
    for (double x : xs)
        out += fmt::format(
            "<line x1=\"{0:.1f}\" x2=\"{0:.1f}\" y1=\"{1:.1f}\" y2=\"{2:.1f}\" stroke=\"#999\"/>"
            "<text x=\"{0:.1f}\" y=\"{3:.1f}\" text-anchor=\"middle\">{4}</text>\n",
            px(x), top + plot_h, top + plot_h + 5, top + plot_h + 18, num(x));
    out += fmt::format(
        "<rect x=\"{:.1f}\" y=\"{:.1f}\" width=\"{:.1f}\" height=\"{:.1f}\" fill=\"none\" "
        "stroke=\"#333\"/>\n",
        left, top, pw, plot_h);
    out += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"middle\">{}{}</text>\n",
                       left + pw / 2, top + plot_h + 34, xml_escape(x_label),
                       log_x ? " (log scale)" : "");
    out += fmt::format(
        "<text transform=\"translate(16 {:.1f}) rotate(-90)\" text-anchor=\"middle\">{}</text>\n",
        top + plot_h / 2, xml_escape(y_label));
    for (size_t i = 0; i < series.size(); ++i) {
        auto pts = series[i].points;
        std::sort(pts.begin(), pts.end());
        const char* col = series_colour(i);
        std::string path;
        for (auto [x, y] : pts) path += fmt::format("{:.1f},{:.1f} ", px(x), py(y));
        out += fmt::format("<g class=\"series\"><title>{}</title>\n", xml_escape(series[i].name));
        if (pts.size() > 1)
            out += fmt::format(
                "<polyline points=\"{}\" fill=\"none\" stroke=\"{}\" stroke-width=\"2\"/>\n", path,
                col);
        for (auto [x, y] : pts)
            out += fmt::format(
                "<circle cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"3.5\" fill=\"{}\"><title>{}: {} clients, "
                "{:.1f}</title></circle>\n",
                px(x), py(y), col, xml_escape(series[i].name), num(x), y);
        out += "</g>\n";
        const double ly = legend_y + 18 * double(i);
        out += fmt::format(
            "<rect x=\"{:.1f}\" y=\"{:.1f}\" width=\"12\" height=\"12\" fill=\"{}\"/>"
            "<text x=\"{:.1f}\" y=\"{:.1f}\">{}</text>\n",
            left, ly - 10, col, left + 18, ly, xml_escape(series[i].name));
    }
    out += "</svg>\n";
    return out;
}

std::string svg_hbar_chart(const std::string& title, const std::string& value_label,
                           const std::vector<std::string>& value_names,
                           const std::vector<BarGroup>& groups) {
    const double w = 720, top = 52, right = 60, bar_h = 12, gap = 10;
    if (groups.empty()) return no_data(w, title);
    size_t longest = 0;
    double v_max = 0;
    for (const auto& g : groups) {
        longest = std::max(longest, std::min(g.name.size(), kMaxLabelChars));
        for (double v : g.values) v_max = std::max(v_max, v);
    }
    const double left = std::clamp(kCharW * double(longest) + 16, 80.0, 340.0);
    const double pw = w - left - right;
    const std::vector<double> xt = nice_ticks(v_max, 5);
    const double x_hi = xt.back();
    const double group_h = bar_h * double(value_names.size()) + gap;
    const double plot_h = group_h * double(groups.size());
    const double h = top + plot_h + 40;
    auto px = [&](double v) { return left + v / x_hi * pw; };

    std::string out = open_svg(w, h, title);
    for (size_t j = 0; j < value_names.size(); ++j)  // legend under the title
        out += fmt::format(
            "<rect x=\"{:.1f}\" y=\"28\" width=\"12\" height=\"12\" fill=\"{}\"/>"
            "<text x=\"{:.1f}\" y=\"38\">{}</text>\n",
            left + 110 * double(j), series_colour(j), left + 110 * double(j) + 16,
            xml_escape(value_names[j]));
    for (double t : xt)
        out += fmt::format(
            "<line x1=\"{0:.1f}\" x2=\"{0:.1f}\" y1=\"{1:.1f}\" y2=\"{2:.1f}\" stroke=\"#ddd\"/>"
            "<text x=\"{0:.1f}\" y=\"{3:.1f}\" text-anchor=\"middle\">{4}</text>\n",
            px(t), top, top + plot_h, top + plot_h + 14, num(t));
    out += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"middle\">{}</text>\n",
                       left + pw / 2, top + plot_h + 32, xml_escape(value_label));
    for (size_t i = 0; i < groups.size(); ++i) {
        const double gy = top + group_h * double(i) + gap / 2;
        const auto& g = groups[i];
        out += fmt::format(
            "<g class=\"group\"><title>{0}</title><text x=\"{1:.1f}\" y=\"{2:.1f}\" "
            "text-anchor=\"end\">{3}</text>\n",
            xml_escape(g.detail.empty() ? g.name : g.detail), left - 6, gy + group_h / 2,
            xml_escape(short_label(g.name)));
        for (size_t j = 0; j < g.values.size() && j < value_names.size(); ++j) {
            const double y = gy + bar_h * double(j);
            out += fmt::format(
                "<rect x=\"{:.1f}\" y=\"{:.1f}\" width=\"{:.1f}\" height=\"{:.1f}\" fill=\"{}\">"
                "<title>{}: {:.4g}</title></rect>"
                "<text x=\"{:.1f}\" y=\"{:.1f}\" font-size=\"10\">{:.4g}</text>\n",
                left, y, std::max(0.0, px(g.values[j]) - left), bar_h - 2, series_colour(j),
                xml_escape(value_names[j]), g.values[j], px(g.values[j]) + 3, y + bar_h - 3,
                g.values[j]);
        }
        out += "</g>\n";
    }
    out += fmt::format(
        "<line x1=\"{0:.1f}\" x2=\"{0:.1f}\" y1=\"{1:.1f}\" y2=\"{2:.1f}\" stroke=\"#333\"/>\n",
        left, top, top + plot_h);
    out += "</svg>\n";
    return out;
}

}  // namespace qs::bench

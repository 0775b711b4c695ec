// SVG heatmap (see svg_heatmap.h).
#include "bench/svg_heatmap.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "bench/svg_chart.h"

namespace qs::bench {

std::string heat_colour(double v) {
    if (std::isnan(v)) return "#dddddd";
    v = std::clamp(v, 0.0, 1.0);
    // red (215, 48, 39) -> yellow (254, 224, 139) -> green (26, 152, 80)
    auto mix = [](double a, double b, double t) { return int(std::lround(a + (b - a) * t)); };
    int r, g, b;
    if (v < 0.5) {
        double t = v / 0.5;
        r = mix(215, 254, t), g = mix(48, 224, t), b = mix(39, 139, t);
    } else {
        double t = (v - 0.5) / 0.5;
        r = mix(254, 26, t), g = mix(224, 152, t), b = mix(139, 80, t);
    }
    return fmt::format("#{:02x}{:02x}{:02x}", r, g, b);
}

std::string svg_heatmap(const Heatmap& h) {
    const double cell_w = 72, cell_h = 30, top = 48;
    size_t label_chars = h.y_label.size();
    for (const auto& n : h.y_names) label_chars = std::max(label_chars, n.size());
    const double left = 24 + 7.0 * double(std::min<size_t>(label_chars, 30));
    const double w = left + cell_w * double(std::max<size_t>(1, h.x_names.size())) + 20;
    const double hgt = top + cell_h * double(h.y_names.size()) + 50;
    std::string s = fmt::format(
        "<svg class=\"chart\" width=\"{0:.0f}\" height=\"{1:.0f}\" viewBox=\"0 0 {0:.0f} "
        "{1:.0f}\" role=\"img\" font-family=\"sans-serif\" font-size=\"12\">\n<title>{2}</title>\n"
        "<text x=\"{3:.0f}\" y=\"18\" text-anchor=\"middle\" font-size=\"14\" "
        "font-weight=\"bold\">{2}</text>\n",
        w, hgt, xml_escape(h.title), w / 2);
    s += fmt::format("<text x=\"8\" y=\"{:.0f}\" font-weight=\"bold\">{}</text>\n", top - 8,
                     xml_escape(h.y_label));
    for (size_t r = 0; r < h.y_names.size(); ++r) {
        const double y = top + cell_h * double(r);
        s += fmt::format("<text x=\"{:.0f}\" y=\"{:.0f}\" text-anchor=\"end\">{}</text>\n",
                         left - 6, y + cell_h / 2 + 4, xml_escape(h.y_names[r]));
        for (size_t c = 0; c < h.x_names.size(); ++c) {
            const double x = left + cell_w * double(c);
            double v = r < h.values.size() && c < h.values[r].size() ? h.values[r][c] : NAN;
            std::string text =
                r < h.cell_text.size() && c < h.cell_text[r].size() ? h.cell_text[r][c] : "";
            if (text.empty()) text = std::isnan(v) ? "-" : fmt::format("{:.0f}%", 100 * v);
            std::string tip = r < h.tooltips.size() && c < h.tooltips[r].size()
                                  ? h.tooltips[r][c]
                                  : h.y_names[r] + ", " + h.x_names[c] + ": " + text;
            s += fmt::format(
                "<g><title>{}</title><rect x=\"{:.0f}\" y=\"{:.0f}\" width=\"{:.0f}\" "
                "height=\"{:.0f}\" fill=\"{}\" stroke=\"#fff\"/><text x=\"{:.0f}\" y=\"{:.0f}\" "
                "text-anchor=\"middle\">{}</text></g>\n",
                xml_escape(tip), x, y, cell_w, cell_h, heat_colour(v), x + cell_w / 2,
                y + cell_h / 2 + 4, xml_escape(text));
        }
    }
    const double bottom = top + cell_h * double(h.y_names.size());
    for (size_t c = 0; c < h.x_names.size(); ++c)
        s += fmt::format("<text x=\"{:.0f}\" y=\"{:.0f}\" text-anchor=\"middle\">{}</text>\n",
                         left + cell_w * (double(c) + 0.5), bottom + 16, xml_escape(h.x_names[c]));
    s += fmt::format("<text x=\"{:.0f}\" y=\"{:.0f}\" text-anchor=\"middle\">{}</text>\n</svg>\n",
                     left + cell_w * double(h.x_names.size()) / 2, bottom + 36,
                     xml_escape(h.x_label));
    return s;
}

}  // namespace qs::bench

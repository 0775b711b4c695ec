// Small inline SVG charts for the campaign report: a line chart (throughput against offered
// clients) and a horizontal grouped bar chart (TTFT percentiles, $/M per configuration). Plain
// SVG text, no scripts and no external references, so the report is one self-contained file.
// Axes start at 0 with 1-2-5 ticks; long labels are shortened with the full text in a <title>
// tooltip. Pure functions; the CLI's main thread.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace qs::bench {

struct Series {
    std::string name;
    std::vector<std::pair<double, double>> points;  // (x, y), drawn in x order
};

// x ticks are the distinct x values of the data; the x axis is log2 when all x > 0 and they
// span a factor of 8 or more (client counts usually double), else linear.
std::string svg_line_chart(const std::string& title, const std::string& x_label,
                           const std::string& y_label, const std::vector<Series>& series);

struct BarGroup {
    std::string name;            // the row label (shortened past ~44 characters)
    std::vector<double> values;  // one per value name
    std::string detail;          // tooltip of the row; empty: the name
};
// One row per group, one bar per value name (legend), bars grow to the right.
std::string svg_hbar_chart(const std::string& title, const std::string& value_label,
                           const std::vector<std::string>& value_names,
                           const std::vector<BarGroup>& groups);

std::string xml_escape(std::string_view s);
// Tick values 0, step, 2 step, ... covering max (step 1, 2 or 5 times a power of ten).
std::vector<double> nice_ticks(double max, int target_count);
// Colour of series i (a fixed palette that cycles).
const char* series_colour(size_t i);

}  // namespace qs::bench

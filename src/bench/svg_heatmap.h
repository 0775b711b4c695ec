// An inline SVG heatmap for reports (the needle-in-a-haystack grid of `eval niah`, included by
// `campaign report --niah`): rows x columns of cells coloured from red (0) through yellow to
// green (1), each with its text and a tooltip. Plain SVG, no scripts. Pure; the CLI's main thread.
#pragma once

#include <string>
#include <vector>

namespace qs::bench {

struct Heatmap {
    std::string title, x_label, y_label;
    std::vector<std::string> x_names;  // columns
    std::vector<std::string> y_names;  // rows, drawn top to bottom
    // [row][column] in [0, 1]; NaN: no data (grey). Missing rows/columns are no data.
    std::vector<std::vector<double>> values;
    std::vector<std::vector<std::string>> cell_text;  // shown in the cell; empty: the value as %
    std::vector<std::vector<std::string>> tooltips;   // optional
};

std::string svg_heatmap(const Heatmap& h);
// The fill colour of a value in [0, 1] ("#rrggbb"), grey for NaN.
std::string heat_colour(double v);

}  // namespace qs::bench

// `eval niah` results as a grid: per (length, depth) cell the share of samples answered exactly,
// as a Markdown table and as an HTML section with an SVG heatmap (bench/svg_heatmap.h) that
// `campaign report --niah` and `eval niah --html` include. Pure; main thread.
#pragma once

#include <string>
#include <vector>

#include "eval/niah.h"

namespace qs::eval {

struct NiahGrid {
    std::vector<int64_t> lengths;  // rows, ascending
    std::vector<double> depths;    // columns, ascending
    // [length][depth]: passed and total samples, mean prompt tokens the server counted.
    std::vector<std::vector<int64_t>> passed, total;
    std::vector<std::vector<double>> prompt_tokens;
    int64_t num_errors = 0;  // requests that failed in transport or stream
};
NiahGrid niah_grid(const std::vector<NiahResult>& results);

std::string niah_markdown(const NiahGrid& g);
// <h2>, the heatmap and the table; `source` (the results path) is named under the title.
std::string niah_html_section(const NiahGrid& g, const std::string& source);

}  // namespace qs::eval

// Sweep knobs, grid parsing and expansion (see sweep_grid.h).
#include "bench/sweep_grid.h"

#include <algorithm>
#include <fstream>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "config/engine_options.h"
#include "core/read_file.h"

namespace qs::bench {

namespace {

std::string trim(const std::string& s) {
    const char* ws = " \t\r\n";
    size_t b = s.find_first_not_of(ws);
    if (b == std::string::npos) return "";
    return s.substr(b, s.find_last_not_of(ws) - b + 1);
}

std::vector<std::string> split_commas(const std::string& s) {
    std::vector<std::string> out;
    std::stringstream ss(s);
    for (std::string item; std::getline(ss, item, ',');) out.push_back(trim(item));
    if (!s.empty() && s.back() == ',') out.push_back("");  // "a," has an empty last value
    return out;
}

Result<std::string> on_off_value(const std::string& knob, const std::string& v) {
    std::string l = v;
    std::transform(l.begin(), l.end(), l.begin(), [](unsigned char c) { return std::tolower(c); });
    if (l == "on" || l == "true" || l == "1" || l == "yes") return std::string("on");
    if (l == "off" || l == "false" || l == "0" || l == "no") return std::string("off");
    return invalid_argument(
        fmt::format("knob {} takes on or off (true/false, 1/0), got '{}'", knob, v));
}

Status add_axis(Grid& grid, const std::string& name, const std::vector<std::string>& raw) {
    QS_ASSIGN_OR_RETURN(const Knob* knob, find_knob(name));
    for (const auto& a : grid.axes)
        if (a.knob == knob) return invalid_argument("knob " + knob->name + " is in the grid twice");
    if (raw.empty()) return invalid_argument("knob " + knob->name + " has no values");
    GridAxis axis{knob, {}};
    for (const auto& r : raw) {
        if (r.empty()) return invalid_argument("knob " + knob->name + " has an empty value");
        std::string v = r;
        if (knob->on_off) {
            QS_ASSIGN_OR_RETURN(v, on_off_value(knob->name, r));
        }
        if (std::find(axis.values.begin(), axis.values.end(), v) != axis.values.end())
            return invalid_argument(fmt::format("knob {} lists '{}' twice", knob->name, v));
        axis.values.push_back(v);
    }
    grid.axes.push_back(std::move(axis));
    return Status::ok();
}

}  // namespace

const std::vector<Knob>& sweep_knobs() {
    static const std::vector<Knob> kKnobs = [] {
        std::vector<Knob> k;
        for (const EngineOption& o : engine_options())
            k.push_back({std::string(o.knob), std::string(o.name), o.kind == OptionKind::kOffSwitch});
        std::sort(k.begin(), k.end(), [](const Knob& a, const Knob& b) { return a.name < b.name; });
        return k;
    }();
    return kKnobs;
}

Result<const Knob*> find_knob(const std::string& raw) {
    std::string name = raw;
    std::replace(name.begin(), name.end(), '-', '_');
    for (const auto& k : sweep_knobs())
        if (k.name == name || (k.on_off && name == "enable_" + k.name)) return &k;
    std::string known;
    for (const auto& k : sweep_knobs()) known += (known.empty() ? "" : ", ") + k.name;
    std::string hint;
    return invalid_argument(fmt::format(
        "unknown knob '{}': `qwenserve serve` has no such option yet{}. Known knobs: {}", raw, hint,
        known));
}

int64_t Grid::num_points() const {
    int64_t n = 1;
    for (const auto& a : axes) n *= int64_t(a.values.size());
    return n;
}

Status add_grid_spec(Grid& grid, const std::string& spec) {
    size_t eq = spec.find('=');
    if (eq == std::string::npos)
        return invalid_argument("--grid wants knob=value1,value2,..., got '" + spec + "'");
    return add_axis(grid, trim(spec.substr(0, eq)), split_commas(spec.substr(eq + 1)));
}

Status read_grid_file(Grid& grid, const std::string& path) {
    auto file = read_file(path);
    if (!file.is_ok()) return file.status().with_context("grid file");
    const std::string text = std::move(file).value();
    auto where = [&](const Status& s, const std::string& at) {
        return s.is_ok() ? s : s.with_context(path + at);
    };
    if (trim(text).rfind('{', 0) == 0) {
        auto j = nlohmann::ordered_json::parse(text, nullptr, false);
        if (j.is_discarded() || !j.is_object())
            return corrupt_data("grid file '" + path + "' is not a JSON object");
        for (const auto& [name, v] : j.items()) {
            std::vector<std::string> values;
            for (const auto& x : v.is_array() ? v : nlohmann::ordered_json::array({v})) {
                if (x.is_string())
                    values.push_back(x.get<std::string>());
                else if (x.is_boolean())
                    values.push_back(x.get<bool>() ? "on" : "off");
                else if (x.is_number())
                    values.push_back(x.dump());
                else
                    return corrupt_data(fmt::format(
                        "grid file '{}': knob {}: values must be strings, numbers or booleans",
                        path, name));
            }
            QS_RETURN_IF_ERROR(where(add_axis(grid, name, values), ""));
        }
        return Status::ok();
    }
    std::stringstream lines(text);
    int n = 0;
    for (std::string line; std::getline(lines, line);) {
        ++n;
        if (auto hash = line.find('#'); hash != std::string::npos) line.resize(hash);
        line = trim(line);
        if (line.empty()) continue;
        QS_RETURN_IF_ERROR(where(add_grid_spec(grid, line), fmt::format(":{}", n)));
    }
    return Status::ok();
}

std::vector<GridPoint> expand_grid(const Grid& grid) {
    std::vector<GridPoint> out;
    std::vector<size_t> at(grid.axes.size(), 0);  // odometer; the last axis turns fastest
    for (int64_t p = 0; p < grid.num_points(); ++p) {
        GridPoint pt;
        for (size_t a = 0; a < grid.axes.size(); ++a) {
            const Knob& k = *grid.axes[a].knob;
            const std::string& v = grid.axes[a].values[at[a]];
            pt.knobs.emplace_back(k.name, v);
            pt.label += (pt.label.empty() ? "" : ",") + k.name + "=" + v;
            if (!k.on_off) {
                pt.serve_args.push_back("--" + k.flag);
                pt.serve_args.push_back(v);
            } else if (v == "off") {
                pt.serve_args.push_back("--" + k.flag);
            }
        }
        if (pt.label.empty()) pt.label = "default";
        out.push_back(std::move(pt));
        for (size_t a = grid.axes.size(); a-- > 0;) {
            if (++at[a] < grid.axes[a].values.size()) break;
            at[a] = 0;
        }
    }
    return out;
}

Status check_serve_args(const Grid& grid, const std::vector<std::string>& serve_args) {
    for (const auto& arg : serve_args) {
        if (arg.rfind("--", 0) != 0) continue;
        std::string name = arg.substr(
            2, arg.find('=') == std::string::npos ? std::string::npos : arg.find('=') - 2);
        if (name == "port" || name == "host" || name == "model")
            return invalid_argument("serve argument " + arg +
                                    " is set by the sweep: use the sweep's --" + name);
        for (const auto& a : grid.axes)
            if (name == a.knob->flag)
                return invalid_argument("serve argument " + arg + " sets knob " + a.knob->name +
                                        ", which the grid sweeps");
    }
    return Status::ok();
}

}  // namespace qs::bench

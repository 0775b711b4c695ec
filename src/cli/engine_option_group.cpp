// The engine options as a help group (see engine_option_group.h).
#include "cli/engine_option_group.h"

#include <algorithm>

#include "config/engine_options.h"
#include "engine/engine_config_text.h"

namespace qs::cli {

OptionGroup engine_option_group(const std::vector<std::string_view>& only) {
    const EngineConfig defaults;
    OptionGroup g{"Engine", {}};
    for (const EngineOption& e : engine_options()) {
        if (!only.empty() && std::find(only.begin(), only.end(), e.name) == only.end()) continue;
        CliOption o;
        o.name = std::string(e.name);
        o.help = std::string(e.help);
        switch (e.kind) {
            case OptionKind::kInt: o.metavar = "N"; break;
            case OptionKind::kReal: o.metavar = "X"; break;
            case OptionKind::kChoice:
                for (std::string_view c : e.choices) o.metavar += (o.metavar.empty() ? "" : "|") + std::string(c);
                break;
            case OptionKind::kOffSwitch: break;
        }
        o.allowed = option_range_text(e);
        if (e.takes_value()) o.default_text = engine_option_value(defaults, e.name);
        g.options.push_back(std::move(o));
    }
    return g;
}

}  // namespace qs::cli

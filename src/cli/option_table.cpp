// Option tables: building, help text, parsing (see option_table.h).
#include "cli/option_table.h"

#include <fmt/format.h>

#include <cstdio>
#include <set>
#include <sstream>

#include "cli/log_options.h"
#include "core/env_var.h"
#include "core/status.h"

namespace qs::cli {

CliOption flag(std::string name, std::string help) {
    CliOption o;
    o.name = std::move(name);
    o.help = std::move(help);
    return o;
}

CliOption valued(std::string name, std::string metavar, std::string help, std::string default_text) {
    CliOption o;
    o.name = std::move(name);
    o.metavar = std::move(metavar);
    o.help = std::move(help);
    o.default_text = std::move(default_text);
    return o;
}

CliOption required(std::string name, std::string metavar, std::string help) {
    CliOption o = valued(std::move(name), std::move(metavar), std::move(help));
    o.required = true;
    return o;
}

CliOption choice(std::string name, std::vector<std::string> choices, std::string help, std::string default_text) {
    std::string metavar;
    for (const auto& c : choices) metavar += (metavar.empty() ? "" : "|") + c;
    CliOption o = valued(std::move(name), std::move(metavar), std::move(help), std::move(default_text));
    o.choices = std::move(choices);
    return o;
}

void add_option_names(const OptionGroup& group, std::set<std::string>& flags, std::set<std::string>& valued) {
    for (const auto& o : group.options) (o.is_flag() ? flags : valued).insert(o.name);
}

std::vector<const CliOption*> all_options(const CommandSpec& spec) {
    std::vector<const CliOption*> out;
    for (const auto& g : spec.groups)
        for (const auto& o : g.options) out.push_back(&o);
    for (const auto& o : log_options().options) out.push_back(&o);
    return out;
}

namespace {

constexpr size_t kWidth = 100;
constexpr const char* kIndent = "      ";

// Appends `text` wrapped at kWidth columns, each line indented.
void wrap(std::string& out, const std::string& text) {
    std::istringstream words(text);
    std::string word, line;
    while (words >> word) {
        if (!line.empty() && std::string(kIndent).size() + line.size() + 1 + word.size() > kWidth) {
            out += kIndent + line + "\n";
            line.clear();
        }
        line += (line.empty() ? "" : " ") + word;
    }
    if (!line.empty()) out += kIndent + line + "\n";
}

void format_option(std::string& out, const CliOption& o) {
    out += "  --" + o.name + (o.short_name.empty() ? "" : ", -" + o.short_name) + (o.is_flag() ? "" : " " + o.metavar) +
           "\n";
    std::string tail;
    if (o.required) tail = "required";
    else if (!o.default_text.empty()) tail = "default: " + o.default_text;
    else if (o.is_flag()) tail = "default: off";
    if (!o.allowed.empty()) tail += std::string(tail.empty() ? "" : "; ") + "allowed: " + o.allowed;
    if (o.repeatable) tail += std::string(tail.empty() ? "" : "; ") + "repeatable; command line only";
    else tail += std::string(tail.empty() ? "" : "; ") + "env: " + env_var_name(o.name) + (o.is_flag() ? "=1" : "");
    wrap(out, o.help);
    out += kIndent + tail + "\n";  // unwrapped, so "env: QS_X" stays greppable
}

void format_group(std::string& out, const OptionGroup& g) {
    out += "\n" + g.title + ":\n";
    for (const auto& o : g.options) format_option(out, o);
}

// "'a', 'b' or 'c'", as the engine options word it (config/engine_options).
std::string choice_list(const std::vector<std::string>& choices) {
    std::string list;
    for (size_t i = 0; i < choices.size(); ++i)
        list += fmt::format("{}'{}'", i == 0 ? "" : i + 1 == choices.size() ? " or " : ", ", choices[i]);
    return list;
}

// argv with every option's short form (-tp, -tp=N) spelled out as its long one; an argument after
// "--" stays as it is.
std::vector<std::string> expand_short_names(const CommandSpec& spec, int argc, char** argv) {
    std::vector<std::string> out(argv, argv + argc);
    for (std::string& a : out) {
        if (a == "--") break;
        if (a.size() < 2 || a[0] != '-' || a[1] == '-') continue;
        const std::string word = a.substr(1, a.find('=') == std::string::npos ? std::string::npos : a.find('=') - 1);
        for (const CliOption* o : all_options(spec))
            if (!o->short_name.empty() && o->short_name == word) {
                a = "--" + o->name + a.substr(1 + word.size());
                break;
            }
    }
    return out;
}

int usage_error(const CommandSpec& spec, const std::string& message) {
    std::fprintf(stderr, "qwenserve %s: %s (see 'qwenserve %s --help')\n", spec.name.c_str(), message.c_str(),
                 spec.name.c_str());
    return exit_code_for(ErrorKind::kInvalidArgument);
}

}  // namespace

std::string format_help(const CommandSpec& spec) {
    std::string out = "usage: qwenserve " + spec.usage + "\n\n" + spec.summary + "\n";
    if (!spec.description.empty()) {
        std::istringstream paragraphs(spec.description);
        std::string para;
        while (std::getline(paragraphs, para)) {
            out += "\n";
            std::string wrapped;
            wrap(wrapped, para);
            // Description paragraphs are not indented like option help.
            std::istringstream lines(wrapped);
            std::string l;
            while (std::getline(lines, l)) out += l.substr(std::string(kIndent).size()) + "\n";
        }
    }
    if (!spec.subcommands.empty()) {
        out += "\nSubcommands (qwenserve help <subcommand> for each one's options):\n";
        for (const auto& s : spec.subcommands) out += "  " + s + "\n";
    }
    for (const auto& g : spec.groups) format_group(out, g);
    format_group(out, log_options());
    out += "\nEvery option can also be set by its environment variable (QS_ + the name in upper case,\n"
           "'-' as '_'); the command line wins.\n";
    return out;
}

bool wants_help(const CommandSpec& spec, int argc, char** argv) {
    std::set<std::string> with_value;
    for (const CliOption* o : all_options(spec))
        if (!o->is_flag()) with_value.insert(o->name);
    for (int i = 0; i < argc; ++i) {
        const std::string a = argv[i];
        if (a == "--") return false;
        if (a == "--help" || a == "-h") return true;
        if (a.rfind("--", 0) == 0 && a.find('=') == std::string::npos && with_value.count(a.substr(2))) ++i;
    }
    return false;
}

std::optional<Args> parse_command(const CommandSpec& spec, int argc, char** argv, int& exit_code) {
    std::vector<std::string> expanded = expand_short_names(spec, argc, argv);
    std::vector<char*> expanded_argv;
    for (std::string& a : expanded) expanded_argv.push_back(a.data());
    argv = expanded_argv.data();
    if (wants_help(spec, argc, argv)) {
        const std::string help = format_help(spec);
        std::fwrite(help.data(), 1, help.size(), stdout);
        exit_code = 0;
        return std::nullopt;
    }
    std::set<std::string> flags, valued_names;
    for (const CliOption* o : all_options(spec)) (o->is_flag() ? flags : valued_names).insert(o->name);
    auto args = Args::parse(argc, argv, flags, valued_names);
    if (!args.is_ok()) {
        exit_code = usage_error(spec, args.status().message());
        return std::nullopt;
    }
    if (!spec.takes_positional && !args->positional().empty()) {
        const std::string& word = args->positional().front();
        exit_code = usage_error(spec, word.rfind("-", 0) == 0 ? "unknown option " + word
                                                              : "unexpected argument '" + word + "'");
        return std::nullopt;
    }
    for (const CliOption* o : all_options(spec)) {
        const auto v = args->get(o->name);
        if (o->required && (!v || v->empty())) {
            exit_code = usage_error(spec, "missing required option --" + o->name);
            return std::nullopt;
        }
        if (v && !o->choices.empty()) {
            bool ok = false;
            for (const auto& c : o->choices) ok |= c == *v;
            if (!ok) {
                exit_code = usage_error(spec, fmt::format("--{} must be {}, got '{}'", o->name, choice_list(o->choices), *v));
                return std::nullopt;
            }
        }
    }
    if (Status st = apply_log_options(*args); !st.is_ok()) {
        exit_code = usage_error(spec, st.message());
        return std::nullopt;
    }
    return std::move(*args);
}

}  // namespace qs::cli

// The command option tables (cli/option_table.h): every option a table lists is accepted on the
// command line and through its QS_* environment variable, required options and choices are
// enforced, --help / -h are recognised in option positions only, and the help names every
// option with its default and variable.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "cli/option_table.h"
#include "core/log.h"
#include "core/log_format.h"

using namespace qs;
using namespace qs::cli;

namespace {

struct Argv {
    explicit Argv(std::vector<std::string> a) : args(std::move(a)) {
        for (auto& s : args) ptrs.push_back(s.data());
    }
    int argc() const { return int(ptrs.size()); }
    char** argv() { return ptrs.data(); }
    std::vector<std::string> args;
    std::vector<char*> ptrs;
};

CommandSpec toy() {
    CommandSpec c;
    c.name = "toy";
    c.summary = "a toy command";
    c.usage = "toy --need X";
    c.groups.push_back({"Toy",
                        {required("need", "X", "a required value"), valued("size", "N", "a size", "7"),
                         flag("quiet", "say less"), choice("mode", {"fast", "slow"}, "the mode", "fast")}});
    return c;
}

std::optional<Args> parse(const CommandSpec& spec, std::vector<std::string> a, int& code) {
    Argv v(std::move(a));
    return parse_command(spec, v.argc(), v.argv(), code);
}

const std::vector<const CommandSpec*> all_specs() {
    std::vector<const CommandSpec*> out;
    for (const char* name : {"serve", "generate", "logits", "capacity", "tokenize", "quantize", "bench",
                             "bench fixture", "campaign", "campaign record", "campaign compare", "campaign sweep",
                             "campaign report"}) {
        const CommandSpec* s = find_spec(name);
        EXPECT_NE(s, nullptr) << name;
        if (s) out.push_back(s);
    }
    return out;
}

}  // namespace

TEST(OptionTable, ParsesValuesFlagsAndDefaults) {
    int code = -1;
    auto a = parse(toy(), {"--need", "x1", "--quiet", "--mode=slow"}, code);
    ASSERT_TRUE(a.has_value());
    EXPECT_EQ(*a->get("need"), "x1");
    EXPECT_TRUE(a->has("quiet"));
    EXPECT_EQ(*a->get("mode"), "slow");
    EXPECT_FALSE(a->get("size").has_value());  // the default is the command's to apply
}

TEST(OptionTable, RequiredChoicesUnknownAndStrayWordsAreUsageErrors) {
    int code = -1;
    EXPECT_FALSE(parse(toy(), {"--size", "3"}, code).has_value());
    EXPECT_EQ(code, 2);
    code = -1;
    EXPECT_FALSE(parse(toy(), {"--need", "x", "--mode", "medium"}, code).has_value());
    EXPECT_EQ(code, 2);
    code = -1;
    EXPECT_FALSE(parse(toy(), {"--need", "x", "--bogus"}, code).has_value());
    EXPECT_EQ(code, 2);
    code = -1;
    EXPECT_FALSE(parse(toy(), {"--need", "x", "stray"}, code).has_value());
    EXPECT_EQ(code, 2);
}

TEST(OptionTable, HelpWinsOverMissingRequiredOptions) {
    testing::internal::CaptureStdout();
    int code = -1;
    EXPECT_FALSE(parse(toy(), {"-h"}, code).has_value());
    const std::string out = testing::internal::GetCapturedStdout();
    EXPECT_EQ(code, 0);
    EXPECT_EQ(out.rfind("usage: qwenserve toy --need X", 0), 0u) << out;
}

TEST(OptionTable, HelpIsOnlyRecognisedInOptionPositions) {
    const CommandSpec spec = toy();
    Argv as_value({"--need", "--help"});
    EXPECT_FALSE(wants_help(spec, as_value.argc(), as_value.argv()));
    Argv after_dashes({"--need", "x", "--", "-h"});
    EXPECT_FALSE(wants_help(spec, after_dashes.argc(), after_dashes.argv()));
    Argv real({"--size", "3", "--help"});
    EXPECT_TRUE(wants_help(spec, real.argc(), real.argv()));
}

TEST(OptionTable, HelpListsEveryOptionWithDefaultAndVariable) {
    const std::string help = format_help(toy());
    EXPECT_NE(help.find("--need X"), std::string::npos) << help;
    EXPECT_NE(help.find("required; env: QS_NEED"), std::string::npos) << help;
    EXPECT_NE(help.find("default: 7; env: QS_SIZE"), std::string::npos) << help;
    EXPECT_NE(help.find("--quiet\n"), std::string::npos) << help;
    EXPECT_NE(help.find("env: QS_QUIET=1"), std::string::npos) << help;
    EXPECT_NE(help.find("--mode fast|slow"), std::string::npos) << help;
    EXPECT_NE(help.find("--log-level error|warn|info|debug"), std::string::npos) << help;
    EXPECT_NE(help.find("env: QS_LOG_FORMAT"), std::string::npos) << help;
    for (const auto& line : [&] {
             std::vector<std::string> v;
             size_t p = 0;
             while (p < help.size()) {
                 size_t e = help.find('\n', p);
                 v.push_back(help.substr(p, e - p));
                 p = e == std::string::npos ? help.size() : e + 1;
             }
             return v;
         }())
        EXPECT_LE(line.size(), 100u) << line;
}

// Every option of every command's table is accepted from its environment variable: the
// variable named in the help is the one the parser reads.
TEST(OptionTable, EveryOptionOfEveryCommandComesFromItsVariable) {
    for (const CommandSpec* spec : all_specs()) {
        for (const CliOption* o : all_options(*spec)) {
            if (o->repeatable) continue;  // command line only (campaign sweep's --grid)
            std::string var = "QS_";
            for (char c : o->name) var += c == '-' ? '_' : char(std::toupper(static_cast<unsigned char>(c)));
            const std::string value = o->is_flag() ? "1" : !o->choices.empty() ? o->choices.back() : "v";
            ASSERT_EQ(::setenv(var.c_str(), value.c_str(), 1), 0);
            // Required options given on the command line so that parsing gets as far as the check.
            std::vector<std::string> argv;
            for (const CliOption* r : all_options(*spec))
                if (r->required && r != o) argv.insert(argv.end(), {"--" + r->name, "x"});
            int code = -1;
            auto a = parse(*spec, argv, code);
            ::unsetenv(var.c_str());
            ASSERT_TRUE(a.has_value()) << spec->name << " --" << o->name;
            EXPECT_EQ(a->get(o->name).value_or("<unset>"), value) << spec->name << " " << var;
            // ... and from the command line.
            argv.push_back("--" + o->name);
            if (!o->is_flag()) argv.push_back(value);
            code = -1;
            a = parse(*spec, argv, code);
            ASSERT_TRUE(a.has_value()) << spec->name << " --" << o->name;
            EXPECT_EQ(a->get(o->name).value_or("<unset>"), value) << spec->name << " --" << o->name;
        }
    }
    set_log_level(LogLevel::kInfo);
    set_log_format(LogFormat::kText);
}

TEST(OptionTable, UsageListsEveryCommand) {
    const std::string usage = format_usage();
    for (const CommandSpec* spec : all_specs())
        EXPECT_NE(usage.find("  " + spec->name + " "), std::string::npos) << spec->name;
}

TEST(OptionTable, ShortNamesSpellOutTheirOption) {
    CommandSpec spec = toy();
    spec.groups[0].options[1].short_name = "sz";
    int code = -1;
    auto a = parse(spec, {"--need", "x", "-sz", "3"}, code);
    ASSERT_TRUE(a.has_value());
    EXPECT_EQ(*a->get("size"), "3");
    a = parse(spec, {"--need", "x", "-sz=4"}, code);
    ASSERT_TRUE(a.has_value());
    EXPECT_EQ(*a->get("size"), "4");
    EXPECT_NE(format_help(spec).find("--size, -sz N"), std::string::npos) << format_help(spec);
    EXPECT_FALSE(parse(spec, {"--need", "x", "-sy", "3"}, code).has_value());  // not a short name
    // serve takes vLLM's -tp.
    const CommandSpec* serve = find_spec("serve");
    ASSERT_NE(serve, nullptr);
    a = parse(*serve, {"--model", "m", "-tp", "2"}, code);
    ASSERT_TRUE(a.has_value());
    EXPECT_EQ(*a->get("tensor-parallel-size"), "2");
}

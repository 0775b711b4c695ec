// A small command-line parser for the subcommands: `--name value`, `--name=value` and
// boolean `--flag`. Unknown or malformed options are errors that name the option.
// Every option can also come from an environment variable QS_<NAME> (upper case, '-' → '_').
#pragma once

#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "core/status.h"

namespace qs {

class Args {
public:
    // flags: names of options that take no value. valued: names of options that take one.
    static Result<Args> parse(int argc, char** argv, const std::set<std::string>& flags,
                              const std::set<std::string>& valued);

    bool has(const std::string& name) const;
    std::optional<std::string> get(const std::string& name) const;
    std::string get_or(const std::string& name, const std::string& fallback) const;
    Result<int64_t> get_int(const std::string& name, int64_t fallback) const;
    Result<double> get_double(const std::string& name, double fallback) const;
    Result<std::string> require(const std::string& name) const;
    const std::vector<std::string>& positional() const { return positional_; }

private:
    std::map<std::string, std::string> values_;
    std::vector<std::string> positional_;
};

// Parses "1,2,3" into integers; the message names `what` on error.
Result<std::vector<int64_t>> parse_int_list(const std::string& text, const std::string& what);

}  // namespace qs

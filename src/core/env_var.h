// The environment variable that stands in for a command-line option (core/args.h reads it when
// the option is not on the command line; the help prints it).
#pragma once

#include <string>
#include <string_view>

namespace qs {

// "max-num-seqs" -> "QS_MAX_NUM_SEQS".
std::string env_var_name(std::string_view option);

}  // namespace qs

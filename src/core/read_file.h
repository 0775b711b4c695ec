// Reading a whole file into memory, the one way every module does it (configs, templates,
// tokenizers, fixtures). Binary: the bytes as they are on disk.
#pragma once

#include <string>

#include "core/status.h"

namespace qs {

// The file's bytes. Errors name the file: not_found "<path>: cannot open" (missing, a directory
// or unreadable), io_error "<path>: read failed".
Result<std::string> read_file(const std::string& path);

}  // namespace qs

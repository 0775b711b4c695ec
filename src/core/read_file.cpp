#include "core/read_file.h"

#include <filesystem>
#include <fstream>
#include <iterator>

namespace qs {

Result<std::string> read_file(const std::string& path) {
    // An ifstream opens a directory on Linux and then fails the read; say "cannot open" instead.
    std::error_code ec;
    if (std::filesystem::is_directory(path, ec)) return not_found(path + ": cannot open (a directory)");
    std::ifstream in(path, std::ios::binary);
    if (!in) return not_found(path + ": cannot open");
    std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (in.bad()) return io_error(path + ": read failed");
    return bytes;
}

}  // namespace qs

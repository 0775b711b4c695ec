// Whole-file reads for tests, over the library's reader (core/read_file.h).
//   read_fixture: a committed fixture or doc that must exist; a missing file throws with the
//                 reader's message (naming the path), which fails the test that asked for it.
//   read_if_exists: a file a test waits for or that a command may not have written: "" if absent.
#pragma once

#include <stdexcept>
#include <string>

#include "core/read_file.h"

namespace qs::test {

inline std::string read_fixture(const std::string& path) {
    auto r = read_file(path);
    if (!r.is_ok()) throw std::runtime_error(r.status().message());
    return std::move(r).value();
}

inline std::string read_if_exists(const std::string& path) {
    auto r = read_file(path);
    return r.is_ok() ? std::move(r).value() : std::string();
}

}  // namespace qs::test

// TmpDir: a fresh directory under $TMPDIR (or /tmp) for one test, removed with its contents when
// the object goes out of scope. Header-only helper shared by the unit tests.
#pragma once

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "core/check.h"

namespace qs::testing {

class TmpDir {
public:
    TmpDir() {
        const char* base = std::getenv("TMPDIR");
        std::string tmpl = std::string(base && base[0] ? base : "/tmp") + "/qs_test_XXXXXX";
        QS_CHECK(::mkdtemp(tmpl.data()) != nullptr);
        path_ = tmpl;
    }
    ~TmpDir() {
        std::error_code ec;
        std::filesystem::remove_all(path_, ec);
    }
    TmpDir(const TmpDir&) = delete;
    TmpDir& operator=(const TmpDir&) = delete;

    const std::string& path() const { return path_; }
    std::string file(const std::string& name) const { return path_ + "/" + name; }
    // Writes `bytes` to DIR/name (replacing it) and returns the full path.
    std::string write(const std::string& name, const std::string& bytes) const {
        std::string p = file(name);
        std::ofstream out(p, std::ios::binary | std::ios::trunc);
        out.write(bytes.data(), std::streamsize(bytes.size()));
        QS_CHECK(out.good());
        return p;
    }

private:
    std::string path_;
};

}  // namespace qs::testing

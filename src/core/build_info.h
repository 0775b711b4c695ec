// What this binary is: the project version and how it was built (git commit, CUDA backend on or
// off and its GPU architecture, build type, compiler), for `qwenserve --version` and the
// start-up log. The values come from CMake at configure time (CMakeLists.txt sets them on
// build_info.cpp alone, so a new commit recompiles one file). Immutable; any thread.
#pragma once

namespace qs {

struct BuildInfo {
    const char* version;     // "0.1.0" (project() in CMakeLists.txt)
    const char* git_hash;    // 12 hex digits of HEAD when CMake last configured; "unknown" outside git
    bool cuda;               // the CUDA backend is compiled in
    const char* cuda_arch;   // "sm_90a"; "" without CUDA
    const char* build_type;  // "Release"
    const char* compiler;    // "GNU 12.2.0"
};

const BuildInfo& build_info();

}  // namespace qs

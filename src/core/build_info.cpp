// The build's identity (see build_info.h); the QS_BUILD_* macros come from CMakeLists.txt.
#include "core/build_info.h"

#ifndef QS_BUILD_VERSION
#define QS_BUILD_VERSION "unknown"
#endif
#ifndef QS_BUILD_GIT_HASH
#define QS_BUILD_GIT_HASH "unknown"
#endif
#ifndef QS_BUILD_CUDA_ARCH
#define QS_BUILD_CUDA_ARCH ""
#endif
#ifndef QS_BUILD_TYPE
#define QS_BUILD_TYPE "unknown"
#endif
#ifndef QS_BUILD_COMPILER
#define QS_BUILD_COMPILER "unknown"
#endif

namespace qs {

const BuildInfo& build_info() {
#ifdef QS_HAVE_CUDA
    constexpr bool kCuda = true;
#else
    constexpr bool kCuda = false;
#endif
    static const BuildInfo info{QS_BUILD_VERSION, QS_BUILD_GIT_HASH, kCuda, kCuda ? QS_BUILD_CUDA_ARCH : "",
                                QS_BUILD_TYPE, QS_BUILD_COMPILER};
    return info;
}

}  // namespace qs
